"""The built-in handler: one Neutron port per pod, announced in a PodPort.

It lists, then watches, every pod of the cluster. For each pod on the pod
network it makes sure a Neutron port exists, then writes the port's address,
MAC and gateway to the pod's PodPort (:mod:`..kubernetes.podport`), which
only the controller may write and the CNI role binds. When the pod is
deleted, or finishes (phase Succeeded or Failed: :mod:`.finished`), its
port and PodPort are deleted.

Neutron calls, at scale: a (re)list of the pods, a retry round and every
``resync_interval`` make one *resync*: one filtered list of the
controller's ports (``device_owner``, the cluster tag
``kuryr-supervisor:<cluster_id>``, the pod network, the project; paged),
never a GET per pod; the first resync of a process also lists the
PodPorts once (what each names, and its status). The plan
(:mod:`.resync`): a pod whose PodPort is written keeps the port it names,
and its other ports are duplicates to delete; a pod without one adopts
its oldest port; a port the list lacks is asked for by id before anything
is done (:mod:`.verify`: a bound pod's vanished port is made again with
the same address and MAC, bound to its node, and its PodPort names it);
ports of pods that are gone are deleted, once a consistent read confirms
them gone (:mod:`.gone`: the pod list comes from a watch cache that may
lag). Pods that need a port take one from their node's pool, or are
created in requests sized from Neutron's measured time per port, a few in
flight, with timeouts that grow with their size, and their PodPorts are
written as each request is answered (:mod:`.provision`); every port is
made through one path (:mod:`~kuryr_supervisor.controller.openstack.
making`: bound, tagged, its MAC derived from its pod's UID). A restart
lists, finds every pod's port, and writes nothing, to Neutron or to
Kubernetes, but the release of what pods that finished meanwhile still
hold (:mod:`.finished`).

NetworkPolicy: beside the ``network_policy`` handler, a pod a policy
selects when it is created gets its port in its policies' groups, and
its address in the peer address groups, before its PodPort is written
(:mod:`.guard`, the provisioning's; its watches run beside the pods').

Composition: the handler holds its pods' record (:class:`~.book.PodBook`)
and the watch's callbacks; each step is a collaborator given to it, built
once the clients exist by its build function (:func:`.assembly.build`, the
entry point): :class:`~.owned.OwnedPorts`, :class:`~.provision.Provision`,
the pools and their refill thread. What the handler process hands it (the
clients, the write fence, the create announcer) comes in its
:class:`~kuryr_supervisor.controller.runtime.Runtime`.

Trust: every port created carries the cluster tag, and only ports with
that tag, on the pod network, in the project are ever adopted or deleted
(:mod:`.owned`); the sweep runs only when every port of the list
carries the tag (Neutron honoured the filter).

Idempotency, so a handler killed at any instant leaks and doubles nothing:
a port created just before a kill is found by the next run's resync and
adopted; where the MACs are derived from the pods' UIDs, a second create
for a pod is refused by Neutron and the first's port adopted, so a lost
answer is sent again at once and no hold is needed; elsewhere a create
whose answer was lost with no status (a timeout) may still commit, so its
pods get no new create until it no longer can, and its late ports are
adopted, or deleted as duplicates once the pod has another, and a
process that starts (a new leader, or a handler restarted by the master)
holds the pods whose creates an earlier process announced until those
can no longer commit
(:mod:`~kuryr_supervisor.controller.leadership.announcer`); a PodPort the
CNI role has bound (``status.boundAt``) is never changed (address, MAC),
but for the id of its port made again.

Failures (:mod:`.retry`): a Kubernetes, Keystone or Neutron outage,
an exhausted port quota, a full pod subnet, or a refusal no restart fixes
(the pod network or subnet deleted, a policy that forbids the creates) is
not the handler's fault: the pod is retried with backoff and readiness
names the dependency (:mod:`.report`: a Warning Event on each waiting
pod). Anything else counts against the handler's failure budget.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from kuryr_supervisor.controller.leadership.announcer import Announcer, Inherited
from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack.making import PortMaker
from kuryr_supervisor.controller.openstack.pace import Pace
from kuryr_supervisor.controller.pools.portpools import PortPools
from kuryr_supervisor.controller.pools.refill import Refill
from kuryr_supervisor.controller.ports import (
    batch,
    finished,
    heaptrim,
    resync,
    verify,
)
from kuryr_supervisor.controller.ports.book import PodBook, PodRecord
from kuryr_supervisor.controller.ports.gone import Gone
from kuryr_supervisor.controller.ports.owned import OwnedPorts
from kuryr_supervisor.controller.ports.provision import Provision
from kuryr_supervisor.controller.ports.report import PortReport
from kuryr_supervisor.controller.ports.retry import Retries
from kuryr_supervisor.controller.ports.status import PortStatus
from kuryr_supervisor.controller.runtime import Runtime
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes.clusterpods import (
    ClusterPod,
    ClusterPods,
    cluster_pod,
)
from kuryr_supervisor.state import Fault

LOG = logging.getLogger(__name__)

#: A relist of this many pods or more hands freed heap back (see below).
_TRIM_FROM = 1000


class NeutronPortHandler:
    """See the module docstring; built by :func:`.assembly.build`, every
    collaborator given."""

    def __init__(self, rt: Runtime, *, client: k8s.K8sClient,
                 cloud: osa.OpenStack, book: PodBook, pace: Pace,
                 report: PortReport, status: PortStatus, retries: Retries,
                 batch: batch.Batch, maker: PortMaker, owned: OwnedPorts,
                 gone: Gone, provision: Provision, pools: PortPools,
                 refill: Refill) -> None:
        self.rt = rt
        self.conf = rt.conf
        self.client, self.cloud = client, cloud
        self.book = book
        self.pace, self.report, self.status = pace, report, status
        self.retries, self.batch = retries, batch
        self.maker, self.owned, self.gone = maker, owned, gone
        self.provision = provision
        self.pools, self.refill = pools, refill   # ports made ahead ([vif_pool])
        self._indexed = False                 # PodPorts not listed yet
        #: what the first list's pods wait for: creates announced before
        #: this process led (:mod:`~kuryr_supervisor.controller.leadership.announcer`)
        self.held: Inherited | None = None
        self._swept_at = 0.0
        self._beat = rt.beat

    # -- running -----------------------------------------------------------------
    def run(self, stopping: threading.Event, beat: Callable[[], None]) -> None:
        with self.rt.running(beat):
            try:
                announcer = self.rt.ctx.announcer
                if announcer is not None:
                    self.held = self._inherited(announcer, stopping)
                self.refill.start(stopping)
                guard = self.provision.guard
                decode = cluster_pod
                if guard is not None:
                    guard.run(self.rt, stopping)
                    decode = guard.decode
                self.rt.informer(ClusterPods(self.client, beat=self._beat,
                                             decode=decode),
                                 self, heartbeat=self.tick,
                                 wake_in=self.wake_in).run(stopping)
            finally:
                self.pools.stop()

    def finish(self, timeout: float) -> None:
        """Nothing to finish: what a stop leaves, the next process's
        resync finds."""

    def wake_in(self) -> float:
        """Seconds until the watch loop should tick: a batch due, or what
        a status poll round found to write."""
        return min(self.batch.wake_in(), self.status.wake_in())

    def _inherited(self, lease: Announcer,
                   stopping: threading.Event) -> Inherited | None:
        """The creates announced before this process led; read before
        anything is listed, retried until read."""
        failing = False
        while not stopping.is_set():
            self._beat()
            try:
                held = lease.inherited()
            except k8s.K8sError as exc:
                if not failing:
                    LOG.warning("port creates wait: %s cannot be read: %s",
                                lease.where, exc)
                failing = True
                stopping.wait(1.0)
                continue
            if held.pods or held.rest:
                LOG.info("port creates of %s sent before this process led "
                         "may commit for up to %.1f s more: those pods wait "
                         "for them", "every pod" if held.rest else
                         f"{len(held.pods)} pods",
                         max([held.rest, *held.pods.values()]))
                return held
            return None
        return None

    def tick(self) -> None:
        """Heartbeat, then a due batch, retries and the periodic resync."""
        self._beat()
        self._flush_if_due()
        book = self.book
        self.status.poll(self.cloud, self.client, book.pods, float(
            self.conf.controller.port_status_interval), self._beat)
        now = time.monotonic()
        if self.retries.due(now) or self._wait_over():
            self.resync(set(self.retries.pending))
            self.retries.tried()
            if not self.retries.pending:        # nobody waits for an address
                self.report.fault(Fault.SUBNET_FULL, False)
        elif self._swept_at and now - self._swept_at >= float(
                self.conf.controller.resync_interval):
            self.resync({uid for uid, pod in book.pods.items() if pod.port_id})

    def _wait_over(self) -> bool:
        """A pod waits for a create that can no longer commit: retry now,
        not at the next backoff round."""
        book = self.book
        held = book.held()
        if held and self.maker.modes.macs:
            for pod in held:            # idempotent creates: nothing to wait
                book.release(pod.uid)
            return False
        if not held:
            return False
        now = self.pace.now()
        over = [pod.uid for pod in held if pod.inflight <= now]
        for uid in over:        # once: an outage keeps its backoff
            book.release(uid)
        return any(u in self.retries.pending for u in over)

    # -- the informer's sink ---------------------------------------------------------
    def replace_all(self, pods: Iterable[ClusterPod], resource_version: str) -> None:
        book, guard = self.book, self.provision.guard
        old, need, placed = book.pods, set(), []
        records, newly = [], []
        for pod in pods:
            if guard is not None:
                guard.seen(pod)
            before = old.get(pod.uid)
            if pod.finished or (before is not None and before.finished):
                # needs none, ever again
                records.append(PodRecord(
                    pod.uid, pod.namespace, pod.name, finished=True,
                    named=before.named if before is not None else None))
                if before is None or not before.finished:
                    newly.append(pod.uid)
                continue
            node = pod.node if pod.needs_port else ""
            records.append(PodRecord(
                pod.uid, pod.namespace, pod.name, node=node,
                port_id=before.port_id, written=before.written,
                named=before.named, inflight=before.inflight)
                if before is not None else
                PodRecord(pod.uid, pod.namespace, pod.name, node=node))
            if pod.needs_port:
                need.add(pod.uid)
                placed.append((pod.uid, pod.node))
        del old
        book.replace(records)   # a pod the list lacks keeps what it names
        del records
        for uid in newly:               # finished while unwatched: the
            self._forget(uid)           # resync releases what it holds
        self.gone.arrived(book.pods)
        if self.held is not None:   # the first list: creates in flight
            now = self.pace.now()
            for uid in need:
                left = self.held.left(uid)
                if left > 0:
                    book.hold(uid, now + left)
            self.held = None
        guard = self.provision.guard            # nodes with pods: pools
        self.pools.listed(placed, () if guard is None or not
                          self.pools.enabled else guard.selected(
                              u for u, _ in placed))
        self.retries.pending &= need
        for uid in self.batch.take():
            batched = book.get(uid)
            if batched is not None and not batched.finished:
                need.add(uid)
        self.resync(need)
        if len(book.pods) >= _TRIM_FROM:
            heaptrim.give_back()

    def upsert(self, pod: ClusterPod) -> None:
        book = self.book
        if self.provision.guard is not None:
            self.provision.guard.seen(pod)
        record = book.get(pod.uid)
        if pod.finished or (record is not None and record.finished):
            self._finish(pod)
            return
        new = record is None
        if record is None:
            record = book.add(PodRecord(pod.uid, pod.namespace, pod.name))
            self.gone.arrived([pod.uid])
        self.pools.placed(pod.uid, pod.node if pod.needs_port else "")
        if pod.needs_port:
            record.needs(pod.node)
        if pod.needs_port and new and record.named is not None:
            # A pod a lagging list lacked: its PodPort names its port,
            # which the next resync finds (nothing is made for it).
            self.retries.wait([pod.uid])
        elif pod.needs_port and not record.written:
            if pod.uid not in self.retries.pending:
                self.batch.add(pod.uid)
        self._flush_if_due()

    def delete(self, pod: ClusterPod) -> None:
        record = self.book.drop(pod.uid)
        port = record.port_id if record is not None else ""
        named = record.named if record is not None else None
        released = record is not None and record.finished and named is None
        self._forget(pod.uid)
        self.gone.arrived([pod.uid])
        if not released:        # a finished pod's went when it finished
            ports = [port] if port and not self.book.uncertain else []
            self.retries.release(pod.namespace, pod.name, lambda: (
                self.owned.release(pod.uid, pod.namespace, pod.name, ports,
                                   look_up=not ports)))
        self._flush_if_due()

    def _finish(self, pod: ClusterPod) -> None:
        """A pod in a terminal phase (:mod:`.finished`), once: what it is
        known to hold is released now, as a deleted pod's; the rest by
        the resyncs. It stays in the book, needing no port."""
        book, uid = self.book, pod.uid
        record = book.get(uid)
        if record is None:
            record = book.add(PodRecord(uid, pod.namespace, pod.name))
            self.gone.arrived([uid])
        port = record.port_id
        record.took("")
        if record.finished:
            if not pod.finished:
                LOG.debug("pod %s/%s: phase %r after a terminal one: an "
                          "event out of date, ignored", pod.namespace,
                          pod.name, pod.phase)
            return
        record.done()
        self._forget(uid)
        ports = finished.held(record, port)
        if ports is not None:
            self._release(uid, ports, look_up=book.uncertain)
        self._flush_if_due()

    def _forget(self, uid: str) -> None:
        """Pod ``uid`` needs no port (gone, or finished): nothing is made,
        retried, polled or told for it any more."""
        self.retries.pending.discard(uid)
        self.batch.discard(uid)
        record = self.book.get(uid)
        if record is not None:          # finished: it stays, needing none
            record.needs_none()
            self.book.release(uid)
        self.pools.placed(uid, "")
        self.report.forget(uid)
        self.status.forget(uid)
        if self.provision.guard is not None:
            self.provision.guard.forget(uid)

    def _release(self, uid: str, ports: list[str], *, look_up: bool) -> None:
        """A finished pod's PodPort and ``ports`` (and, with ``look_up``,
        any other Neutron has of it) released as a deleted pod's; what its
        PodPort named is forgotten once that went through (until then a
        resync tries again)."""
        record = self.book.pods[uid]
        ns, name = record.namespace, record.name
        if self.retries.release(ns, name, lambda: self.owned.release(
                uid, ns, name, ports, look_up=look_up)):
            record.names(None)
        self._beat()

    # -- steps --------------------------------------------------------------------------
    def _flush_if_due(self) -> None:
        if self.batch.due():
            uids = self.batch.take()
            if self.book.uncertain:
                self.resync(set(uids))
            else:
                self.provision.run(uids, [])

    def resync(self, need: set[str]) -> None:
        """One filtered list of our ports: adopt, verify, de-duplicate and
        sweep; then create the ports ``need`` still lacks and write the
        PodPorts not yet written (see the module)."""
        book = self.book
        need = {uid for uid in need
                if (pod := book.get(uid)) is None or not pod.finished}
        self._swept_at = time.monotonic()
        try:
            if not self._indexed:
                # Every PodPort, a pod the list lacks included (it may lag).
                for uid, (mine, said) in self.provision.writer.index(
                        self._beat).items():
                    book.name(uid, mine)
                    self.status.said[uid] = said
                for pod in book.pods.values():
                    if pod.named is not None and not pod.finished:
                        pod.wrote()
                self._indexed = True
            listed = self.owned.listed()
        except (osa.OpenStackError, k8s.K8sError) as exc:
            # Only pods still without their PodPort wait for the next try.
            waiting = [pod for uid in need
                       if (pod := book.get(uid)) is not None
                       and not pod.written]
            self.retries.failed([pod.uid for pod in waiting], exc, book.pods)
            self.report.refused(waiting, exc)
            LOG.warning("port resync postponed: %s", exc)
            return
        book.trust()
        self.retries.pending -= need    # failures below put them back
        ours, proven = resync.proven(listed, self.owned.tag)
        del listed
        guard = self.provision.guard
        groups = verify.defaults if guard is None else guard.of
        ours = self.pools.adopt(                # the pools' ports: theirs
            ours, book.pods, book.all_named(), groups)
        self.report.sweep_proven(proven)
        listing = resync.by_device(ours)
        del ours
        releases = finished.holding(book, listing)
        now = self.pace.now()
        book.expire(now, idempotent=self.provision.idempotent)
        plan = resync.plan(need, book, listing, now)
        for uid, _ in plan.write:
            book.release(uid)
        self.retries.wait(plan.waiting)
        incomplete, again = verify.verify(
            self.cloud, self.client, plan, book,
            verify.Where(self.maker, self.owned.tag, book.node, groups),
            self.report, self._beat)
        self.retries.wait(again)
        self.retries.wait(verify.repoint(
            self.client, plan, book, self.report, self._beat))
        create = plan.create
        if incomplete:          # the list proved wrong: no create, no sweep
            self.retries.wait(create)
            create = []
        elif proven:
            resync.sweep(self.cloud, listing, book.pods, plan.keep,
                         self._beat, confirm=self._confirm_gone)
        self.status.seen(self.client, book.pods, (
            (uid, port) for uid, kept in plan.keep.items()
            if book.named(uid) is not None
            for port in listing.get(uid, ()) if port.id == kept), self._beat)
        self.provision.run(create, plan.write)
        for uid, ports in releases:       # after the pods that need ports
            self._release(uid, ports, look_up=False)

    def _confirm_gone(self, devices: set[str]) -> set[str]:
        """Of the pods the list lacks, those a consistent read confirms
        gone (:mod:`.gone`); what their PodPorts named is forgotten."""
        gone = self.gone.confirm(devices)
        for uid in gone:
            self.book.name(uid, None)
            self.status.forget(uid)
        return gone
