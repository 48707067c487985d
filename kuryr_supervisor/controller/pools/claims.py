"""Pool ports given to pods, their Neutron update made in the background.

A pod that takes a pool port must not wait for Neutron: a real Neutron
under load takes as long to update a port as to make one. So the pod's
PodPort is written at once, naming the pool port, and the port's update
(``device_id`` = the pod's UID, its name, and ``binding:host_id`` only for
a port not yet bound to the pod's node: one PUT,
:func:`.poolports.claim`) follows here, retried with backoff until
Neutron applies it or says the port is gone.

What keeps this safe across a crash at any instant: the PodPort is the
record. Until the update is applied the port still looks like a pool port
in Neutron (``device_id`` :data:`~.poolports.POOL_DEVICE`); the pools
never hand out a port that a claim here holds or that a written PodPort
names (:meth:`.portpools.PortPools.adopt` reads both, and restarts the
update for a named one), so a restarted controller finds the pod's port
through its PodPort, finishes the update, and makes no second port. A
claim that Neutron refuses as it is (4xx) is logged and tried again at the
next resync; the pod keeps its port meanwhile.
"""
from __future__ import annotations

import concurrent.futures
import logging
import threading

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.pools import poolports

LOG = logging.getLogger(__name__)

#: Longest wait between two tries of one update (seconds).
BACKOFF_MAX = 30.0


class Claims:
    """Updates of claimed pool ports still to be applied (see module)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.lock = threading.Lock()
        #: port id -> the pod UID it was given to, until Neutron says so
        self.by_port: dict[str, str] = {}
        self.cloud: osa.OpenStack | None = None
        self.stopping = threading.Event()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def owner(self, port_id: str) -> str:
        with self.lock:
            return self.by_port.get(port_id, "")

    def __len__(self) -> int:
        with self.lock:
            return len(self.by_port)

    def submit(self, port_id: str, uid: str, name: str, host: str) -> None:
        """Apply the claim in the background (once per port at a time)."""
        with self.lock:
            if port_id in self.by_port:
                return
            self.by_port[port_id] = uid
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.workers, thread_name_prefix="pool-claim")
        self._pool.submit(self._apply, port_id, uid, name, host)

    def _apply(self, port_id: str, uid: str, name: str, host: str) -> None:
        delay = 1.0
        try:
            while not self.stopping.is_set() and self.cloud is not None:
                try:
                    poolports.claim(self.cloud, port_id, device_id=uid,
                                      name=name, host=host)
                    return
                except osa.OpenStackRefused as exc:
                    if exc.status == 404:
                        LOG.warning("pool port %s of pod %s is gone",
                                    port_id, uid)
                        return
                    if host and exc.status in (400, 403):
                        LOG.warning("pool port %s: binding:host_id %s "
                                    "refused (%s); updated without it",
                                    port_id, host, exc)
                        host = ""
                        continue
                    LOG.warning("pool port %s of pod %s not updated: %s",
                                port_id, uid, exc)
                    return
                except Exception as exc:  # noqa: BLE001 - retried
                    LOG.debug("pool port %s of pod %s: %s; again in %gs",
                              port_id, uid, exc, delay)
                    self.stopping.wait(delay)
                    delay = min(BACKOFF_MAX, 2 * delay)
        finally:
            with self.lock:
                self.by_port.pop(port_id, None)
