"""PodPorts written concurrently, a bounded number at a time.

A PodPort is one Kubernetes write per pod (that is inherent: one object
each); one after another they would make 10,000 pods wait for 10,000 round
trips. :class:`PodPortWriter` writes a batch's PodPorts from
:data:`WORKERS` threads and waits for all of them, beating, so the handler's
loop stays the only place that changes its state and still heartbeats. 8
stays inside the client's connection pool (5 per CPU) and far below the API
server's in-flight limit (400 by default, shared by the whole cluster),
while 100 writes of 2-5 ms each take tens of milliseconds, not hundreds.

One write is :func:`write`: create the PodPort, or, if one of that name
exists (a restart, or an earlier pod's of the same name), read it and
replace it only if it says otherwise, the version read as precondition.
Every call is bounded by the client's request timeout.
"""
from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence

from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes import podport

#: Concurrent PodPort writes (see the module).
WORKERS = 8
#: How often the waiting loop beats (seconds).
_BEAT_EVERY = 0.2

#: (pod UID, namespace, pod name, the PodPort's data)
Item = tuple[str, str, str, podport.PortData]


def write(client: k8s.K8sClient, namespace: str, name: str,
          data: podport.PortData) -> None:
    obj = podport.body(namespace, name, data)
    try:
        client.create_podport(namespace, obj)
        return
    except k8s.K8sPermanent as exc:
        if exc.status != 409:
            raise
    current = client.get_podport(namespace, name)
    if current is None:
        raise k8s.K8sTemporary("PodPort vanished while being written")
    if podport.same(current, data):
        return
    obj["metadata"]["resourceVersion"] = (
        current.get("metadata") or {}).get("resourceVersion", "")
    client.replace_podport(namespace, name, obj)


class PodPortWriter:
    """Writes PodPorts from a small pool; see the module."""

    def __init__(self, client: k8s.K8sClient, *, workers: int = WORKERS) -> None:
        self.client = client
        self.workers = workers
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def write_all(self, items: Sequence[Item], beat: Callable[[], None]
                  ) -> dict[str, BaseException | None]:
        """UID -> None (written) or the error, for every item."""
        if not items:
            return {}
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.workers, thread_name_prefix="podport")
        futures = {self._pool.submit(write, self.client, ns, name, data): uid
                   for uid, ns, name, data in items}
        waiting = set(futures)
        while waiting:
            beat()
            _, waiting = concurrent.futures.wait(waiting, timeout=_BEAT_EVERY)
        return {uid: future.exception() for future, uid in futures.items()}
