"""Pool ports given to pods, their Neutron update made in the background.

A pod that takes a pool port must not wait for Neutron: a real Neutron
under load takes as long to update a port as to make one. So the pod's
PodPort is written at once, naming the pool port, and the port's update
(``device_id`` = the pod's UID, its name, and ``binding:host_id`` only for
a port not yet bound to the pod's node: one PUT,
:func:`.poolports.claim`, through the one path every port is made or
re-bound by, :mod:`~kuryr_supervisor.controller.openstack.making`) follows
here, retried with backoff until Neutron applies it or says the port is
gone. A claim backing off after a failure no longer holds the refill
back (:meth:`Claims.busy`). A closed pool port's claim (a pod a
NetworkPolicy selects: its groups set in the same PUT,
:mod:`.portpools`) goes before the others waiting: its pod admits
nothing until it is applied, while another pod's port already works.

What keeps this safe across a crash at any instant: the PodPort is the
record. Until the update is applied the port still looks like a pool port
in Neutron (``device_id`` :data:`~.poolports.POOL_DEVICE`); the pools
never hand out a port that a claim here holds or that a written PodPort
names (:meth:`.portpools.PortPools.adopt` reads both, and restarts the
update for a named one, its binding included), so a restarted controller
finds the pod's port through its PodPort, finishes the update, and makes
no second port. A
claim that Neutron refuses as it is (4xx) is logged and tried again at the
next resync; the pod keeps its port meanwhile.
"""
from __future__ import annotations

import itertools
import logging
import queue
import threading
from typing import Any

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack.making import PortMaker, WrongNode
from kuryr_supervisor.controller.pools import poolports

LOG = logging.getLogger(__name__)

#: Longest wait between two tries of one update (seconds).
BACKOFF_MAX = 30.0


class Claims:
    """Updates of claimed pool ports still to be applied (see module)."""

    def __init__(self, workers: int, maker: PortMaker) -> None:
        """``workers``: updates sent at once; ``maker``: the one path
        every port is made or re-bound by."""
        self.workers = workers
        self.maker = maker
        self.lock = threading.Lock()
        #: port id -> the pod UID it was given to, until Neutron says so
        self.by_port: dict[str, str] = {}
        #: ports whose last try failed (backing off): no longer in the way
        #: of a refill (:meth:`busy`)
        self.failing: set[str] = set()
        #: Set once the handler stops: no update is tried again.
        self.stopping = threading.Event()
        #: (0: sets groups, 1: not; order of submission; the claim)
        self._queue: queue.PriorityQueue[tuple[int, int, tuple[Any, ...]]] \
            = queue.PriorityQueue()
        self._order = itertools.count()
        self._threads = 0

    def stop(self) -> None:
        """The handler stops: updates backing off are not tried again
        (the next process finishes them, see the module)."""
        self.stopping.set()

    def owner(self, port_id: str) -> str:
        with self.lock:
            return self.by_port.get(port_id, "")

    def __len__(self) -> int:
        with self.lock:
            return len(self.by_port)

    def busy(self) -> int:
        """Claims on their way to Neutron (not backing off after a
        failure): pods' updates the refill lets go first."""
        with self.lock:
            return len(self.by_port) - len(self.failing)

    def submit(self, port: osa.Port, uid: str, name: str, host: str,
               groups: tuple[str, ...] | None = None) -> None:
        """Apply the claim in the background (once per port at a time):
        ``port`` to pod ``uid`` under ``name``, bound to node ``host``
        when it is not yet, in ``groups`` when not None (a closed port
        given to a pod a NetworkPolicy selects)."""
        with self.lock:
            if port.id in self.by_port:
                return
            self.by_port[port.id] = uid
            start = self._threads < min(self.workers, len(self.by_port))
            if start:
                self._threads += 1
        # A claim that sets groups goes first: its pod admits nothing
        # until it is applied; another pod's port already works.
        self._queue.put((0 if groups is not None else 1, next(self._order),
                         (port, uid, name, host, groups)))
        if start:
            threading.Thread(target=self._work, daemon=True,
                             name="pool-claim").start()

    def _work(self) -> None:
        """One of the ``workers`` threads: claims, most urgent first,
        until the handler stops."""
        while not self.stopping.is_set():
            try:
                _, _, claim = self._queue.get(timeout=1.0)
            except queue.Empty:
                continue
            self._apply(*claim)

    def _apply(self, port: osa.Port, uid: str, name: str, host: str,
               groups: tuple[str, ...] | None) -> None:
        delay = 1.0
        try:
            while not self.stopping.is_set():
                try:
                    poolports.claim(self.maker, port, device_id=uid,
                                    name=name, host=host, groups=groups)
                    return
                except WrongNode as exc:
                    LOG.error("pool port %s of pod %s: %s", port.id, uid, exc)
                    return
                except osa.OpenStackRefused as exc:
                    if exc.status == 404 and groups is None:
                        LOG.warning("pool port %s of pod %s is gone",
                                    port.id, uid)
                        return
                    LOG.warning("pool port %s of pod %s not updated: %s",
                                port.id, uid, exc)
                    return
                except Exception as exc:  # noqa: BLE001 - retried
                    LOG.debug("pool port %s of pod %s: %s; again in %gs",
                              port.id, uid, exc, delay)
                    with self.lock:
                        self.failing.add(port.id)
                    self.stopping.wait(delay)
                    delay = min(BACKOFF_MAX, 2 * delay)
        finally:
            with self.lock:
                self.by_port.pop(port.id, None)
                self.failing.discard(port.id)
