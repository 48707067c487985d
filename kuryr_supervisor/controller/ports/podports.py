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
exists (a restart, or an earlier pod's of the same name), read it and,
only if it says otherwise, delete it (its UID as precondition) and create
it anew: its status (``boundAt``, ``portStatus``) is the old pod's or the
old port's, and the status subresource survives a replace of the object.
A new port's status, when Neutron says more than DOWN, is written right
after, in the background (one at a time, by a thread of its own, never
waited for by the handler's loop, and only while no PodPort is written:
what the pods wait for goes first), so a restart finds it said and no pod
waits for another's status. Every call is bounded by the client's
request timeout. :func:`repoint` is the one change of a bound PodPort: a
vanished port made again with the same address and MAC, whose new id it
then names (its status kept).

A restart hands over thousands of pods whose ports already existed
(*adopted*), so their PodPorts are most likely written already: from
:data:`LIST_FROM` adopted items on, every PodPort of the cluster is listed
first (pages of :data:`PAGE_SIZE`, one page decoded at a time) and those
that already say exactly what they should are not written: 21 list
requests instead of 21,000 calls for 10,500 pods. Below that, a few
per-pod checks cost less than listing a large cluster; a new port's
PodPort can never be right already, so new ports never make a list. A
failed list only means every item is written.
"""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, NamedTuple

from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes import podport

LOG = logging.getLogger(__name__)

#: Concurrent PodPort writes (see the module).
WORKERS = 8
#: From this many adopted items on, PodPorts are listed before writing.
LIST_FROM = 20
#: PodPorts per page of that list.
PAGE_SIZE = 500
#: How often the waiting loop beats (seconds).
_BEAT_EVERY = 0.2

class Named(NamedTuple):
    """What a written PodPort names (immutable once bound)."""

    port_id: str
    ip: str             # its IPv4 address
    mac: str


@dataclasses.dataclass(frozen=True, slots=True)
class PodPort:
    """A PodPort to write: the pod (UID, namespace, name), the port data
    it carries, the new port's status to write once it is ("": none), the
    pod's node (its label)."""

    uid: str
    namespace: str
    name: str
    data: podport.PortData
    status: str = ""
    node: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Kept:
    """What a write found: the pod's PodPort names another port and is
    bound (the CNI role recorded ``status.boundAt``), so it is never
    rewritten; ``named`` is what it names."""

    named: Named


#: What one write did: None (the PodPort says the data), :class:`Kept`,
#: or the error it failed with.
Outcome = Kept | BaseException | None


def named(obj: Mapping[str, Any]) -> tuple[str, Named] | None:
    """(pod UID, what it names) of a valid PodPort."""
    try:
        data = podport.from_object(obj)
    except ValueError:
        return None
    return data.pod_uid, Named(data.port_id, str(data.address.ip), data.mac)


def write(client: k8s.K8sClient, namespace: str, name: str,
          data: podport.PortData, node: str = "") -> bool | Kept:
    """Create the PodPort, or make anew an earlier pod's of the same name
    or the pod's own while it is not bound; a bound one is never changed
    (:class:`Kept`, returned). ``node`` labels it (the node follows its
    pods' PodPorts by that label). Written: whether it says no status yet
    (a new port's may then be written)."""
    obj = podport.body(namespace, name, data, node)
    exists = False
    try:
        client.podports.create(obj, namespace=namespace)
    except k8s.K8sPermanent as exc:
        if exc.status != 409:
            raise
        exists = True
    if exists:
        current = client.podports.get(name, namespace=namespace)
        if current is None:
            raise k8s.K8sTemporary("PodPort vanished while being written")
        if podport.same(current, data):
            return not podport.port_status(current)   # written before
        else:
            mine = named(current)
            if mine is not None and mine[0] == data.pod_uid and \
                    podport.bound_at(current):
                return Kept(mine[1])
            _anew(client, namespace, current, obj)
    return True


def _anew(client: k8s.K8sClient, namespace: str,
          current: Mapping[str, Any], obj: dict[str, Any]) -> None:
    """Delete ``current`` (its UID as precondition) and create ``obj`` in
    its place: not a replace, which would keep the old status (the old
    pod's ``boundAt``, the old port's ``portStatus``)."""
    meta = current.get("metadata") or {}
    client.podports.delete(str(meta.get("name") or ""), namespace=namespace,
                           uid=str(meta.get("uid") or ""))
    client.podports.create(obj, namespace=namespace)


def repoint(client: k8s.K8sClient, namespace: str, name: str,
            named_now: Named, port_id: str, node: str = "") -> Kept | None:
    """The pod's bound PodPort names ``port_id`` from now on: its port
    vanished and was made again with the same address and MAC
    (``named_now``: what it names), bound to ``node``, whose label it gets
    (that node re-points the pod's interface); nothing else changes, its
    status (``boundAt``) included. A PodPort that says otherwise by now
    is left as it is (:class:`Kept`, returned; None: re-pointed)."""
    current = client.podports.get(name, namespace=namespace)
    mine = named(current) if current is not None else None
    if current is None or mine is None or mine[1] != named_now:
        return Kept(mine[1] if mine else named_now)
    obj: dict[str, Any] = {key: current[key] for key in (
        "apiVersion", "kind", "metadata", "spec") if key in current}
    obj["spec"] = dict(obj["spec"], portId=port_id)
    if node:
        meta = obj["metadata"] = dict(obj["metadata"])
        meta["labels"] = {**(meta.get("labels") or {}),
                          podport.NODE_LABEL: podport.node_label(node)}
    client.podports.replace(name, obj, namespace=namespace)
    return None


def _unheard(uid: str, status: str) -> None:
    """No one hears of the statuses written."""


class PodPortWriter:
    """Writes PodPorts from a small pool; see the module."""

    def __init__(self, client: k8s.K8sClient, *, workers: int = WORKERS,
                 on_said: Callable[[str, str], object] | None = None) -> None:
        self.client = client
        self.workers = workers
        #: Called (from a writer's thread) with a pod and the status
        #: written to its new PodPort.
        self.on_said: Callable[[str, str], object] = on_said or _unheard
        self._lock = threading.Condition()
        #: New ports' statuses to write: (uid, namespace, name, status),
        #: written by a thread of their own, never waited for.
        self._unsaid: collections.deque[tuple[str, str, str, str]] = \
            collections.deque()
        self._sayer: threading.Thread | None = None
        #: Set while no PodPort is being written: statuses wait for it.
        self._idle = threading.Event()
        self._idle.set()
        #: Pods whose new port's status is being written (not written
        #: again meanwhile, :class:`~.status.PortStatus`).
        self.saying: set[str] = set()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def write_all(self, items: Sequence[PodPort], beat: Callable[[], None],
                  *, adopted: Collection[str] = ()) -> dict[str, Outcome]:
        """UID -> what the write of each item did (:data:`Outcome`);
        ``adopted``: the UIDs whose port existed before (see the
        module)."""
        done: dict[str, Outcome] = {}
        if len(adopted) >= LIST_FROM:
            done = dict.fromkeys(self.unchanged(
                [item for item in items if item.uid in adopted], beat))
            items = [item for item in items if item.uid not in done]
        if not items:
            return done
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.workers, thread_name_prefix="podport")
        self._idle.clear()              # PodPorts first, statuses after
        try:
            futures = {self._pool.submit(write, self.client, item.namespace,
                                         item.name, item.data, item.node): item
                       for item in items}
            self._wait(futures, beat)
        finally:
            self._idle.set()
        for future, item in futures.items():
            error = future.exception()
            result = None if error is not None else future.result()
            done[item.uid] = error if error is not None else (
                result if isinstance(result, Kept) else None)
            # Then the new ports' statuses, in the background: what the
            # pods wait for (their PodPorts) never waits for them.
            if result is True and item.status and item.status != "DOWN":
                self._say(item.uid, item.namespace, item.name, item.status)
        return done

    def _say(self, uid: str, namespace: str, name: str, status: str) -> None:
        """Have a new port's status written (see :meth:`_sayer_run`)."""
        with self._lock:
            self.saying.add(uid)
            self._unsaid.append((uid, namespace, name, status))
            self._lock.notify()
            if self._sayer is None:
                self._sayer = threading.Thread(target=self._sayer_run,
                                               name="podport-status",
                                               daemon=True)
                self._sayer.start()

    def _sayer_run(self) -> None:
        """Write the statuses queued, one at a time, while no PodPort is
        being written; ``on_said`` hears of each."""
        while True:
            with self._lock:
                while not self._unsaid:
                    self._lock.wait()
                uid, namespace, name, status = self._unsaid.popleft()
            self._idle.wait()
            try:
                self.client.podports.patch(
                    name, podport.status_patch({"portStatus": status}),
                    namespace=namespace, subresource="status")
            except k8s.K8sError as exc:
                LOG.info("status of PodPort %s/%s not written: %s",
                         namespace, name, exc)
            else:
                self.on_said(uid, status)
            finally:
                with self._lock:
                    self.saying.discard(uid)

    @staticmethod
    def _wait(futures: Collection[concurrent.futures.Future[Any]],
              beat: Callable[[], None]) -> None:
        waiting = set(futures)
        while waiting:
            beat()
            _, waiting = concurrent.futures.wait(waiting, timeout=_BEAT_EVERY)

    def index(self, beat: Callable[[], None]
              ) -> dict[str, tuple[Named, str]]:
        """Pod UID -> (what it names, status.portStatus) of every valid
        PodPort of the cluster (paged); raises the API's error."""
        out: dict[str, tuple[Named, str]] = {}
        token = ""
        while True:
            page, _, token = self.client.podports.page(limit=PAGE_SIZE,
                                                       token=token)
            for obj in page:
                found = named(obj)
                if found is not None:
                    out[found[0]] = (found[1], podport.port_status(obj))
            del page
            beat()
            if not token:
                return out

    def unchanged(self, items: Sequence[PodPort], beat: Callable[[], None]
                  ) -> set[str]:
        """The UIDs of ``items`` whose PodPort already says their data."""
        wanted = {(item.namespace, item.name): (item.uid, item.data)
                  for item in items}
        found: set[str] = set()
        token = ""
        try:
            while True:
                page, _, token = self.client.podports.page(limit=PAGE_SIZE,
                                                           token=token)
                for obj in page:
                    meta = obj.get("metadata") or {}
                    hit = wanted.get((str(meta.get("namespace")),
                                      str(meta.get("name"))))
                    if hit is not None and podport.same(obj, hit[1]):
                        found.add(hit[0])
                del page
                beat()
                if not token:
                    return found
        except k8s.K8sError as exc:
            LOG.info("PodPorts not listed (%s); each is written", exc)
            return set()
