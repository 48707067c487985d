"""Pods given their ports, and their PodPorts written: the step every
resync and every batch of the port handler ends with.

:class:`Provision` is one of the handler's collaborators, built from the
others (the adapters, the port maker, the pools, the pace, the retries,
the report, the announcer, the write fence) and the handler's
:class:`~.book.PodBook`; following one pod from "needs a port" to
"PodPort written" is :meth:`Provision.run`:

1. a pod takes a free port of its node's pool at once
   (:mod:`~kuryr_supervisor.controller.pools`, ``[vif_pool]``); only the
   pods the pools could not serve (a miss) go on;
2. the rest are created in requests sized and timed by the pace
   (:mod:`.batch`), each made through the one path every port is made by
   (:mod:`~kuryr_supervisor.controller.openstack.making`: bound to the
   pod's node, tagged, its MAC derived from the pod's UID where Neutron
   allows);
3. the PodPorts of each answered request are written at once, not after
   the slowest one (:mod:`.podports`), with the port's status when
   Neutron says more than DOWN.

Beside the ``network_policy`` handler (a :class:`~.guard.PolicyGuard`),
a pod is never handed a port that admits more than its policies allow:
its security groups go in its create (per port in the bulk body) or in
the one PUT that claims its pool port: a closed pool port (in no group
until that PUT, admitting nothing) is claimed in the background like any
pool port; one in the default group (its node's closed pool was empty)
is claimed here, before its PodPort. Its address joins the peer address
groups it belongs in (one call per group and request) before its PodPort
is written. Without the guard nothing of this is asked or called.

Idempotency: where the MACs are derived, a create sent twice for a pod is
refused by Neutron the second time (the port the first made is adopted),
so a create whose answer was lost is sent again at the next try, and the
creates an earlier process left at Neutron need no hold. Where Neutron's
policy refuses the MACs, as before: a create whose answer was lost leaves
its pods *in flight* until it may no longer commit, and each create is
announced first where the process that may take this one's place reads
it (the handler process's announcer,
:mod:`~kuryr_supervisor.controller.leadership.announcer`), for as long as
it could commit from when it could last leave (the write fence's end).

A bound PodPort is never rewritten (:class:`~.podports.Kept`): what it
names is recorded instead, and the port just made becomes a duplicate the
next resync deletes. A full pod subnet, and a refusal no restart fixes
(the network or subnet gone, a policy that forbids the creates), is
reported (:mod:`.report`), never counted. A pod whose port cannot be made
because the project's quota is used up gets a free port of the fullest
other pool, bound to its node first (the pools hold the quota others
need); without the right to bind, that port is given back and the pod's
create tried again at once.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from kuryr_supervisor.controller.leadership.announcer import Announcer
from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack import wire
from kuryr_supervisor.controller.openstack.making import MacsRefused, PortMaker
from kuryr_supervisor.controller.openstack.pace import COMMIT_WAIT, Pace
from kuryr_supervisor.controller.pools import poolports
from kuryr_supervisor.controller.pools.portpools import PortPools
from kuryr_supervisor.controller.ports import batch
from kuryr_supervisor.controller.ports.book import PodBook
from kuryr_supervisor.controller.ports.guard import PolicyGuard
from kuryr_supervisor.controller.ports.owned import OwnedPorts
from kuryr_supervisor.controller.ports.podports import (
    Kept,
    Named,
    PodPort,
    PodPortWriter,
)
from kuryr_supervisor.controller.ports.report import PortReport
from kuryr_supervisor.controller.ports.retry import OUTAGES, Retries
from kuryr_supervisor.controller.ports.status import PortStatus
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes.fence import WriteFence
from kuryr_supervisor.state import Fault

LOG = logging.getLogger(__name__)


class Provision:
    """See the module. ``in_flight``: create requests at Neutron at once
    (``[controller] port_create_requests``); ``beat``: the handler's
    heartbeat."""

    def __init__(self, book: PodBook, *, cloud: osa.OpenStack,
                 maker: PortMaker, writer: PodPortWriter, owned: OwnedPorts,
                 pools: PortPools, pace: Pace, retries: Retries,
                 report: PortReport, status: PortStatus,
                 announcer: Announcer | None, in_flight: int,
                 beat: Callable[[], None],
                 fence: WriteFence | None = None,
                 guard: PolicyGuard | None = None) -> None:
        self.book, self.cloud, self.writer = book, cloud, writer
        self.maker, self.owned, self.pools = maker, owned, pools
        self.pace, self.retries = pace, retries
        self.report, self.status = report, status
        self.announcer = announcer
        self.fence = fence or WriteFence()
        self.in_flight, self.beat = in_flight, beat
        self.guard = guard
        #: pod UID -> its port's security groups (None: the defaults), of
        #: the pods being provisioned (a guard's)
        self.groups: dict[str, tuple[str, ...] | None] = {}
        #: uid -> until when (pace clock) its announced create may commit
        self.announced: dict[str, float] = {}

    @property
    def idempotent(self) -> bool:
        """A create sent twice makes one port (derived MACs): no create
        needs waiting for, nor announcing."""
        return bool(self.maker.modes.macs)

    def run(self, create: list[str],
            write: list[tuple[str, osa.Port]]) -> None:
        """Ports for ``create`` (a pool's, else made in bulk), then
        PodPorts for those and for ``write`` (ports that already
        existed)."""
        book = self.book
        now = self.pace.now()
        waiting = [] if self.idempotent else [
            u for u in create if (pod := book.get(u)) is not None
            and pod.inflight > now]
        self.retries.wait(waiting)       # their create may still commit
        free = [u for u in create if u in book and u not in waiting]
        if self.guard is not None:
            free = self._guarded(self.guard, free)
        served = self.pools.serve(free, book.pods, groups={
            u: g for u in free if (g := self.groups.get(u)) is not None})
        for uid, port in served.taken:
            book.holds(uid, port.id)
        # Ports that existed, and pool ports claimed in the background:
        # at once; those claimed here, each as its claim is answered.
        self.write(write + [(u, p) for u, p in served.taken
                            if u not in served.own])
        if served.own:
            self._claim(served.taken, served.own)
        if served.rest:
            self._create(served.rest)
        if not self.maker.modes.bind:       # Neutron refused binding:host_id
            self.pools.unbind("a pod's port create was refused")

    def _guarded(self, guard: PolicyGuard, free: list[str]) -> list[str]:
        """The pods of ``free`` whose groups ``guard`` could say (each
        one's in :attr:`groups`); the others wait or fail."""
        try:
            groups, unknown = guard.groups(free)
        except osa.OpenStackError as exc:
            self.retries.failed(free, exc, self.book.pods)
            return []
        self.retries.wait(unknown)
        self.groups = groups
        return [u for u in free if u in groups]

    def _claim(self, taken: list[tuple[str, osa.Port]], own: set[str]
               ) -> None:
        """The pool ports of the pods ``own`` names claimed here, their
        groups in the claim's PUT, a few at once, each pod's PodPort
        written once its claim is answered (those answered together, in
        one write); the others' claims follow in the background. A claim
        that fails leaves its pod waiting for the next resync (which finds
        the port as it is)."""
        book, tag = self.book, self.owned.tag

        def answered(done: dict[str, osa.Port | Exception]) -> None:
            claimed = []
            for uid, got in done.items():
                if isinstance(got, Exception):
                    LOG.info("pool port of pod %s not claimed with its "
                             "security groups: %s", uid, got)
                    self.retries.failed([uid], got, book.pods)
                else:
                    claimed.append((uid, got))
            self.write(claimed)
        poolports.claim_all(self.maker, [poolports.Claim(
            port, uid, book.port_name(uid, tag), book.node(uid),
            self.groups.get(uid)) for uid, port in taken if uid in own],
            workers=self.in_flight, beat=self.beat, on_done=answered)

    def _create(self, create: list[str]) -> None:
        """Ports for ``create`` in bulk, each request's PodPorts written
        as it is answered."""
        book = self.book
        try:
            tag = self.owned.cluster_tag()
        except OUTAGES as exc:
            for uid in create:
                self.retries.failed([uid], exc, book.pods)
            return
        devices = [(book.port_name(u, tag), u) for u in create if u in book]
        if not devices:
            return

        def made(ports: dict[str, osa.Port]) -> None:
            items = []
            for uid, port in ports.items():
                if uid in book:
                    book.holds(uid, port.id)
                    items.append((uid, port))
            self.write(items, new=True)
        out = batch.create(
            self.maker, devices, tag=tag, pace=self.pace,
            hosts={u: book.node(u) for _, u in devices},
            beat=self.beat, in_flight=self.in_flight, on_made=made,
            announce=self.announce,
            groups={u: g for u in create
                    if (g := self.groups.get(u)) is not None})
        if out.made:
            LOG.info("created %d of %d ports asked in bulk", len(out.made),
                     len(devices))
            self.report.made()
        if not self.idempotent:
            for uid, until in out.pending.items():
                if uid in book:
                    book.hold(uid, until)
        self._failed(out.failed, bool(out.made))

    def _failed(self, failed: dict[str, Exception], made: bool) -> None:
        """What the pods whose ports were not made wait for (see the
        module); ``made``: some ports were."""
        book = self.book
        if self.guard is not None and any(
                isinstance(e, osa.OpenStackRefused) and e.status == 404
                for e in failed.values()):
            self.guard.stale()          # a group named is gone
        full = [book.pods[u] for u, e in failed.items()
                if isinstance(e, wire.SubnetFull) and u in book]
        if full:
            self.report.subnet_full(full, str(failed[full[0].uid]))
        elif made:
            self.report.fault(Fault.SUBNET_FULL, False)
        for kind in wire.UNFIXABLE:
            stuck = [book.pods[u] for u, e in failed.items()
                     if isinstance(e, kind) and u in book]
            if stuck:
                self.report.refused(stuck, failed[stuck[0].uid])
        starving = [u for u, e in failed.items()
                    if isinstance(e, osa.QuotaExceeded)]
        if starving:
            relieved = self._relieve(starving)
            failed = {u: e for u, e in failed.items() if u not in relieved}
        for uid, error in failed.items():
            if isinstance(error, (MacsRefused, osa.MacInUse)):
                # Nothing made: tried again as Neutron allows (its MACs),
                # or after a list (what a 409 left unsettled).
                if isinstance(error, osa.MacInUse):
                    book.doubt()
                self.retries.wait([uid])
                continue
            if not isinstance(error, (osa.OpenStackRefused, k8s.K8sError)):
                book.doubt()                # the answer was lost
            self.retries.failed([uid], error, book.pods)

    def _relieve(self, starving: list[str]) -> set[str]:
        """Pods the quota starves (used up, by other nodes' pools among
        others): each gets a free port of the fullest other pool, bound to
        its node first; without the right to bind, that port is given back
        to Neutron and the pod's create tried again at once. The pods
        served."""
        book, tag = self.book, self.owned.tag
        served: list[tuple[str, osa.Port]] = []
        gave = 0
        for uid in starving:
            node = book.node(uid)
            port = self.pools.take_fullest(
                node, closed=self.groups.get(uid) is not None) \
                if uid in book else None
            if port is None:
                break
            try:
                if node and port.host != node and not self.maker.modes.bind:
                    raise osa.OpenStackRefused("no right to bind", 403)
                claimed = poolports.claim(
                    self.maker, port, device_id=uid,
                    name=book.port_name(uid, tag), host=node,
                    groups=self.groups.get(uid))
            except osa.OpenStackError as exc:
                LOG.info("pod %s starves (the port quota is used up) and "
                         "pool port %s cannot be bound to %s (%s): given "
                         "back instead", uid, port.id, node, exc)
                try:
                    gave += poolports.give_back(self.cloud, [port.id])
                except osa.OpenStackError:
                    self.pools.keep([port])
                continue
            LOG.info("pod %s starves (the port quota is used up): it gets "
                     "pool port %s, bound to %s", uid, claimed.id, node)
            book.holds(uid, claimed.id)
            served.append((uid, claimed))
        self.write(served)
        if gave:
            self.retries.now()              # the quota has room: at once
        return {uid for uid, _ in served}

    def announce(self, uids: list[str], likely: float) -> None:
        """Before a create of ``uids`` that Neutron plausibly works on for
        ``likely`` seconds: say so where the process that may take this
        one's place will read it (the creates Lease of a leader, else the
        master's shared memory), with every other pod whose create may
        still commit (:mod:`~kuryr_supervisor.controller.leadership.
        announcer`). It may commit until ``COMMIT_WAIT`` times that after
        it could last leave: when this process's write fence closes. Not
        needed where creates are idempotent (derived MACs)."""
        if self.announcer is None or self.idempotent:
            return
        book, now = self.book, self.pace.now()
        within = self.fence.left() + COMMIT_WAIT * likely
        # Pods with their PodPort, or gone, need no one to wait for them.
        self.announced = {u: t for u, t in self.announced.items()
                          if t > now and (pod := book.get(u)) is not None
                          and not pod.written}
        for uid, until in [*book.creates(),
                           *((u, now + within) for u in uids)]:
            if until > now:
                self.announced[uid] = max(self.announced.get(uid, 0.0), until)
        self.announcer.cover({u: t - now for u, t in self.announced.items()})

    def write(self, write: list[tuple[str, osa.Port]], *,
              new: bool = False) -> None:
        """The PodPorts of ``write`` ((pod, its port)), a few at a time;
        ``new``: the ports were just made (their status is written with
        their PodPorts when Neutron says more than DOWN)."""
        book = self.book
        if self.guard is not None and write:
            try:
                joined = self.guard.join(write)
            except osa.OpenStackError as exc:
                joined = {uid: exc for uid, _ in write}
            for uid, why in joined.items():
                self.retries.failed([uid], why, book.pods)
            write = [(u, p) for u, p in write if u not in joined]
        items = []
        for uid, port in write:
            pod = book.get(uid)
            if pod is None:
                continue
            try:
                data = self.owned.data(uid, port)
            except Exception as exc:  # noqa: BLE001 - counted per pod below
                self.retries.failed([uid], exc, book.pods)
                continue
            items.append(PodPort(uid, pod.namespace, pod.name, data,
                                 port.state if new else "", pod.node))
        ports = dict(write)
        done = self.writer.write_all(items, self.beat)
        for uid, error in done.items():
            if isinstance(error, Kept):     # the PodPort stays as it is
                book.name(uid, error.named)
                error = None
            elif error is None and uid in ports:
                port = ports[uid]
                book.name(uid, Named(port.id, str(port.ip),
                                     port.mac.lower()))
                self.status.made(uid, port.id)
            if error is None:
                pod = book.get(uid)
                if pod is not None:
                    pod.wrote()
                self.retries.succeeded(uid)
            else:
                self.retries.failed([uid], error, book.pods)
