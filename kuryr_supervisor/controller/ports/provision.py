"""Pods given their ports, and their PodPorts written: the step every
resync and every batch of the port handler ends with.

:class:`Provision` is one of the handler's collaborators, built from the
others (the adapters, the pools, the pace, the retries, the report, the
announcer) and the handler's :class:`~.book.PodBook`; following one pod
from "needs a port" to "PodPort written" is :meth:`Provision.run`:

1. a pod with no create in flight takes a free port of its node's pool at
   once (:mod:`~kuryr_supervisor.controller.pools`, ``[vif_pool]``); only
   the pods the pools could not serve (a miss) go on;
2. the rest are created in requests sized and timed by the pace
   (:mod:`.batch`), each announced first where the process that may take
   this one's place reads it (the handler process's announcer,
   :mod:`~kuryr_supervisor.controller.leadership.announcer`);
3. the PodPorts of each answered request are written at once, not after
   the slowest one (:mod:`.podports`).

A bound PodPort is never rewritten (:class:`~.podports.Kept`): what it
names is recorded instead, and the port just made becomes a duplicate the
next resync deletes. A create whose answer was lost leaves its pods *in
flight* until it may no longer commit; a full pod subnet is reported
(:mod:`.report`), never counted; a Neutron whose policy refuses
``binding:host_id`` gets unbound ports from then on (said once), and the
pools turn unbound with it.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from kuryr_supervisor.controller.leadership.announcer import Announcer
from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack import wire
from kuryr_supervisor.controller.openstack.pace import Pace
from kuryr_supervisor.controller.pools.portpools import PortPools
from kuryr_supervisor.controller.ports import batch
from kuryr_supervisor.controller.ports.book import PodBook
from kuryr_supervisor.controller.ports.owned import OwnedPorts
from kuryr_supervisor.controller.ports.podports import Kept, PodPortWriter
from kuryr_supervisor.controller.ports.report import PortReport
from kuryr_supervisor.controller.ports.retry import OUTAGES, Retries
from kuryr_supervisor.controller.ports.status import PortStatus
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.state import Fault

LOG = logging.getLogger(__name__)


class Provision:
    """See the module. ``in_flight``: create requests at Neutron at once
    (``[controller] port_create_requests``); ``beat``: the handler's
    heartbeat."""

    def __init__(self, book: PodBook, *, cloud: osa.OpenStack,
                 writer: PodPortWriter, owned: OwnedPorts, pools: PortPools,
                 pace: Pace, retries: Retries, report: PortReport,
                 status: PortStatus, announcer: Announcer | None,
                 subnet_id: str, in_flight: int,
                 beat: Callable[[], None]) -> None:
        self.book, self.cloud, self.writer = book, cloud, writer
        self.owned, self.pools, self.pace = owned, pools, pace
        self.retries, self.report, self.status = retries, report, status
        self.announcer = announcer
        self.subnet_id, self.in_flight, self.beat = subnet_id, in_flight, beat
        #: uid -> until when (pace clock) its announced create may commit
        self.announced: dict[str, float] = {}
        #: binding:host_id is sent (until Neutron's policy refuses it)
        self.bind_hosts = True

    def run(self, create: list[str],
            write: list[tuple[str, osa.Port]]) -> None:
        """Ports for ``create`` (a pool's, else made in bulk), then
        PodPorts for those and for ``write`` (ports that already
        existed)."""
        book = self.book
        now = self.pace.now()
        waiting = [u for u in create if book.inflight.get(u, 0.0) > now]
        self.retries.wait(waiting)       # their create may still commit
        free = [u for u in create if u in book.pods and u not in waiting]
        served = self.pools.serve(free, book.pods, book.nodes)
        for uid, port in served.taken:
            book.holds(uid, port.id)
        self.write(write + served.taken)    # ports that existed: at once
        if served.rest:
            self._create(served.rest)
        if not self.bind_hosts:         # Neutron refused binding:host_id
            self.pools.unbind("a pod's port create was refused")

    def _create(self, create: list[str]) -> None:
        """Ports for ``create`` in bulk, each request's PodPorts written
        as it is answered."""
        book = self.book
        devices = [(book.port_name(u), u) for u in create if u in book.pods]
        if not devices:
            return

        def made(ports: dict[str, osa.Port]) -> None:
            items = []
            for uid, port in ports.items():
                if uid in book.pods:
                    book.holds(uid, port.id)
                    items.append((uid, port))
            self.write(items)
        try:
            out = batch.create(
                self.cloud, devices, network_id=self.owned.network_id,
                subnet_id=self.subnet_id, tag=self.owned.cluster_tag(),
                pace=self.pace, hosts=book.nodes if self.bind_hosts else {},
                beat=self.beat, in_flight=self.in_flight, on_made=made,
                announce=self.announce)
        except OUTAGES as exc:         # the cluster tag: nothing made
            out = batch.Outcome(failed=dict.fromkeys(create, exc))
        if out.made:
            LOG.info("created %d of %d ports asked in bulk", len(out.made),
                     len(devices))
        book.inflight.update(out.pending)
        full = [(u, *book.pods[u][:2]) for u, e in out.failed.items()
                if isinstance(e, wire.SubnetFull) and u in book.pods]
        if full:
            self.report.subnet_full(full, str(out.failed[full[0][0]]))
        elif out.made:
            self.report.fault(Fault.SUBNET_FULL, False)
        if self.bind_hosts and any(wire.binding_refused(e)
                                   for e in out.failed.values()):
            # Neutron's policy keeps binding:host_id from this user: ports
            # are made unbound rather than not at all (said once).
            LOG.warning("Neutron refuses binding:host_id to the controller's "
                        "user; ports are created without it (grant a role "
                        "that may set it to bind them to their node)")
            self.bind_hosts = False
            self.retries.wait([u for u, e in out.failed.items()
                               if wire.binding_refused(e)])
            out.failed = {u: e for u, e in out.failed.items()
                          if not wire.binding_refused(e)}
        for uid, error in out.failed.items():
            if not isinstance(error, (osa.OpenStackRefused, k8s.K8sError)):
                book.uncertain = True       # the answer was lost
            self.retries.failed([uid], error, book.pods)

    def announce(self, uids: list[str], within: float) -> None:
        """Before a create of ``uids`` that may commit within ``within``
        seconds: say so where the process that may take this one's place
        will read it (the creates Lease of a leader, else the master's
        shared memory), with every other pod whose create may still commit
        (:mod:`~kuryr_supervisor.controller.leadership.announcer`)."""
        if self.announcer is None:
            return
        book, now = self.book, self.pace.now()
        # Pods with their PodPort, or gone, need no one to wait for them.
        self.announced = {u: t for u, t in self.announced.items()
                          if t > now and u in book.pods
                          and u not in book.written}
        for uid, until in [*book.inflight.items(),
                           *((u, now + within) for u in uids)]:
            if until > now:
                self.announced[uid] = max(self.announced.get(uid, 0.0), until)
        self.announcer.cover({u: t - now for u, t in self.announced.items()})

    def write(self, write: list[tuple[str, osa.Port]]) -> None:
        """The PodPorts of ``write`` ((pod, its port)), a few at a time."""
        book = self.book
        items = []
        for uid, port in write:
            if uid not in book.pods:
                continue
            try:
                data = self.owned.data(uid, port)
            except Exception as exc:  # noqa: BLE001 - counted per pod below
                self.retries.failed([uid], exc, book.pods)
                continue
            items.append((uid, *book.pods[uid][:2], data))
        ports = dict(write)
        for uid, error in self.writer.write_all(items, self.beat).items():
            if isinstance(error, Kept):     # the PodPort stays as it is
                book.named[uid] = error.named
                error = None
            elif error is None and uid in ports:
                port = ports[uid]
                book.named[uid] = (port.id, str(port.ip), port.mac.lower())
                self.status.made(uid, port.id)
            if error is None:
                book.written.add(uid)
                book.nodes.pop(uid, None)
                self.retries.succeeded(uid)
            else:
                self.retries.failed([uid], error, book.pods)
