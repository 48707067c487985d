"""The port handler's writing steps: ports created, PodPorts written.

Split from :mod:`.handler` (the handler's state and its resync) so
each stays small: :class:`PortWrites` is the handler's base and holds the
two steps every resync and every batch ends with. Creates run in requests
sized and timed by :mod:`~kuryr_supervisor.controller.openstack.pace` (:mod:`.batch`); the PodPorts of
each answered request are written at once, not after the slowest one.
A bound PodPort is never rewritten (:class:`~.podports.Kept`): what
it names is recorded instead, and the port just made becomes a duplicate
the next resync deletes. A create whose answer was lost leaves its pods
*in flight* until it may no longer commit; a full pod subnet is reported
(:mod:`.report`), never counted.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from kuryr_supervisor.controller.handlers import HandlerContext
from kuryr_supervisor.controller.leadership import announcer
from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack import wire
from kuryr_supervisor.controller.openstack.pace import Pace
from kuryr_supervisor.controller.ports import batch, resync
from kuryr_supervisor.controller.ports.owned import OwnedPorts
from kuryr_supervisor.controller.ports.podports import Kept, PodPortWriter
from kuryr_supervisor.controller.ports.report import PortReport
from kuryr_supervisor.controller.ports.retry import OUTAGES, Retries
from kuryr_supervisor.controller.ports.status import PortStatus
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.state import Fault

LOG = logging.getLogger(__name__)


class PortWrites:
    """The handler's writing steps; the handler sets the state below."""

    ctx: HandlerContext
    client: k8s.K8sClient | None
    cloud: osa.OpenStack | None
    subnet_id: str
    pods: dict[str, tuple[str, str, str]]
    written: set[str]
    named: dict[str, resync.Named]
    nodes: dict[str, str]
    inflight: dict[str, float]
    #: uid -> until when (pace clock) its announced create may commit
    announced: dict[str, float]
    pace: Pace
    retries: Retries
    report: PortReport
    status: PortStatus
    uncertain: bool
    #: binding:host_id is sent (until Neutron's policy refuses it)
    bind_hosts: bool = True
    _writer: PodPortWriter | None
    _beat: Callable[[], None]

    @property
    def owned(self) -> OwnedPorts:
        raise NotImplementedError

    def _podport_writer(self) -> PodPortWriter:
        assert self.client is not None
        if self._writer is None:
            self._writer = PodPortWriter(self.client)
        return self._writer

    def _create_and_write(self, create: list[str],
                          write: list[tuple[str, osa.Port]]) -> None:
        """Ports for ``create`` (in bulk), then PodPorts for those and for
        ``write`` (ports that already existed)."""
        assert self.cloud is not None
        now = self.pace.now()
        waiting = [u for u in create if self.inflight.get(u, 0.0) > now]
        self.retries.wait(waiting)       # their create may still commit
        devices = [(f"kuryr-{self.pods[u][0]}-{self.pods[u][1]}"[:255], u)
                   for u in create if u in self.pods and u not in waiting]
        self._write(write)              # ports that existed: at once
        if not devices:
            return

        def made(ports: dict[str, osa.Port]) -> None:
            items = []
            for uid, port in ports.items():
                if uid in self.pods:
                    ns, name, _ = self.pods[uid]
                    self.pods[uid] = (ns, name, port.id)
                    items.append((uid, port))
            self._write(items)
        try:
            out = batch.create(
                self.cloud, devices, network_id=self.owned.network_id,
                subnet_id=self.subnet_id, tag=self.owned.cluster_tag(),
                pace=self.pace, hosts=self.nodes if self.bind_hosts else {},
                beat=self._beat,
                in_flight=int(self.ctx.conf.controller.port_create_requests),
                on_made=made, announce=self._announce)
        except OUTAGES as exc:         # the cluster tag: nothing made
            out = batch.Outcome(failed=dict.fromkeys(create, exc))
        if out.made:
            LOG.info("created %d of %d ports asked in bulk", len(out.made),
                     len(devices))
        self.inflight.update(out.pending)
        full = [(u, *self.pods[u][:2]) for u, e in out.failed.items()
                if isinstance(e, wire.SubnetFull) and u in self.pods]
        if full:
            self.report.subnet_full(full, str(out.failed[full[0][0]]))
        elif out.made:
            self.report.fault(Fault.SUBNET_FULL, False)
        if self.bind_hosts and any(wire.binding_refused(e) for e in out.failed.values()):
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
                self.uncertain = True       # the answer was lost
            self.retries.failed([uid], error, self.pods)

    def _announce(self, uids: list[str], within: float) -> None:
        """Before a create of ``uids`` that may commit within ``within``
        seconds: say so where the process that may take this one's place
        will read it (the creates Lease of a leader, else the master's
        shared memory), with every other pod whose create may still commit
        (:mod:`~kuryr_supervisor.controller.leadership.announcer`)."""
        lease = announcer.armed()
        if lease is None:
            return
        now = self.pace.now()
        # Pods with their PodPort, or gone, need no one to wait for them.
        self.announced = {u: t for u, t in self.announced.items()
                          if t > now and u in self.pods
                          and u not in self.written}
        for uid, until in [*self.inflight.items(),
                           *((u, now + within) for u in uids)]:
            if until > now:
                self.announced[uid] = max(self.announced.get(uid, 0.0), until)
        lease.cover({u: t - now for u, t in self.announced.items()})

    def _write(self, write: list[tuple[str, osa.Port]]) -> None:
        assert self.client is not None
        items = []
        for uid, port in write:
            if uid not in self.pods:
                continue
            try:
                data = self.owned.data(uid, port)
            except Exception as exc:  # noqa: BLE001 - counted per pod below
                self.retries.failed([uid], exc, self.pods)
                continue
            items.append((uid, *self.pods[uid][:2], data))
        ports = dict(write)
        for uid, error in self._podport_writer().write_all(
                items, self._beat).items():
            if isinstance(error, Kept):     # the PodPort stays as it is
                self.named[uid] = error.named
                error = None
            elif error is None and uid in ports:
                port = ports[uid]
                self.named[uid] = (port.id, str(port.ip), port.mac.lower())
                self.status.made(uid, port.id)
            if error is None:
                self.written.add(uid)
                self.nodes.pop(uid, None)
                self.retries.succeeded(uid)
            else:
                self.retries.failed([uid], error, self.pods)
