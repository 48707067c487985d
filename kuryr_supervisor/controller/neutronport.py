"""The built-in handler: one Neutron port per pod, announced in a PodPort.

It lists, then watches, every pod of the cluster. For each pod on the pod
network it makes sure a Neutron port exists, then writes the port's address,
MAC and gateway to the pod's PodPort (:mod:`..kubernetes.podport`), which
only the controller may write and the CNI role binds. When the pod is
deleted its port and PodPort are deleted.

Neutron calls, at scale: a (re)list of the pods, a retry round and every
``resync_interval`` make one *resync*: one filtered list of the
controller's ports (``device_owner``, the cluster tag
``kuryr-supervisor:<cluster_id>``, the pod network, the project; paged),
never a GET per pod. From it the resync adopts the port a pod already has,
deletes a pod's extra ports (a race with a second replica: the oldest is
kept), deletes ports whose pod is gone (deleted while no controller ran),
and finds the pods still without one. Pods that need a port are created
in bulk (:mod:`.portbatch`: one POST for up to 100 pods arriving within
50 ms), and their PodPorts written a few at a time (:mod:`.podportwriter`).
A restart lists, finds every pod's port, and writes nothing to Neutron.

Trust: every port created carries the cluster tag, and only ports with
that tag, on the pod network, in the project are ever adopted or deleted
(:mod:`.ownedports`).

Idempotency, so a handler killed at any instant leaks and doubles nothing:
a port created just before a kill is found by the next run's resync and
adopted; a bulk create whose answer was lost makes the next attempt resync
first; a PodPort is replaced only with the resourceVersion read as
precondition. Per pod the handler keeps the UID, namespace, name and port
id (one tuple), and the UID in a set once its PodPort is written.

Failures (:mod:`.portretry`): a Kubernetes, Keystone or Neutron outage,
or an exhausted port quota, is not the handler's fault: the pod is retried
with backoff and readiness names the dependency. Anything else counts
against the handler's failure budget.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import cast

from kuryr_supervisor.controller import heap, ownedports, portbatch, portpool, portresync
from kuryr_supervisor.controller import openstack as osa
from kuryr_supervisor.controller.handlers import HandlerContext
from kuryr_supervisor.controller.podportwriter import PodPortWriter
from kuryr_supervisor.controller.portretry import OUTAGES, Retries
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes.clusterpods import ClusterPod, ClusterPods
from kuryr_supervisor.kubernetes.podwatch import PodSink, PodSource, PodWatch

LOG = logging.getLogger(__name__)

#: A relist of this many pods or more hands freed heap back (see below).
_TRIM_FROM = 1000


class NeutronPortHandler:
    """See the module docstring. ``client`` and ``cloud`` default to the
    configured Kubernetes and OpenStack adapters."""

    def __init__(self, ctx: HandlerContext, *, client: k8s.K8sClient | None = None,
                 cloud: osa.OpenStack | None = None) -> None:
        self.ctx = ctx
        self.client = client
        self.cloud = cloud
        self.subnet_id = ctx.conf.controller.pod_subnet_id
        #: uid -> (namespace, name, port id or "") of every live pod
        self.pods: dict[str, tuple[str, str, str]] = {}
        self.written: set[str] = set()            # uids with their PodPort
        self.retries = Retries(ctx)
        self.batch = portbatch.Batch()
        #: Neutron may hold ports we do not know of (a lost answer, or not
        #: listed yet): list before creating.
        self.uncertain = True
        self._swept_at = 0.0
        self._beat: Callable[[], None] = lambda: None
        self._owned: ownedports.OwnedPorts | None = None
        self._writer: PodPortWriter | None = None
        self.pools = portpool.PortPools(  # ports made ahead ([vif_pool])
            ctx.conf, getattr(ctx.state, "pools", None))

    # -- running -----------------------------------------------------------------
    def run(self, stopping: threading.Event, beat: Callable[[], None]) -> None:
        conf = self.ctx.conf
        self._beat = beat
        if self.client is None:
            self.client = k8s.K8sClient.from_conf(conf)
        if self.cloud is None:
            self.cloud = osa.OpenStack.from_conf(conf)
        self.cloud.beat = beat
        self.pools.start(self.cloud, self.owned, stopping)
        watch = PodWatch(
            cast(PodSource, ClusterPods(self.client, beat=beat)),
            cast(PodSink, self),
            heartbeat=self.tick,
            heartbeat_interval=float(conf.supervisor.heartbeat_interval),
            backoff_max=float(conf.watcher.backoff_max),
            stall_timeout=self.client.watch_read_timeout + 5.0,
            on_synced=lambda: self.ctx.ready(True),
            wake_in=self.batch.wake_in)
        watch.run(stopping)

    @property
    def owned(self) -> ownedports.OwnedPorts:
        """Built on first use: ``run`` may make the clients first."""
        if self._owned is None:
            assert self.client is not None and self.cloud is not None
            opts = self.ctx.conf.controller
            self._owned = ownedports.OwnedPorts(
                self.client, self.cloud, network_id=opts.pod_network_id,
                project_id=str(opts.project_id), cluster_id=opts.cluster_id,
                beat=lambda: self._beat())
        return self._owned

    def tick(self) -> None:
        """Heartbeat, then a due batch, retries and the periodic resync."""
        self._beat()
        self._flush_if_due()
        now = time.monotonic()
        if self.retries.due(now):
            self.resync(set(self.retries.pending))
            self.retries.tried()
        elif self._swept_at and now - self._swept_at >= float(
                self.ctx.conf.controller.resync_interval):
            self.resync({uid for uid, (_, _, port) in self.pods.items() if port})

    # -- PodWatch's sink -------------------------------------------------------------
    def replace_all(self, pods: Iterable[ClusterPod], resource_version: str) -> None:
        old, need = self.pods, set()
        self.pods = {}
        for pod in pods:
            self.pods[pod.uid] = (pod.namespace, pod.name,
                                  old.get(pod.uid, ("", "", ""))[2])
            if pod.needs_port:
                need.add(pod.uid)
        del old
        self.written &= self.pods.keys()
        self.retries.pending &= need
        for uid in self.batch.take():
            if uid in self.pods:
                need.add(uid)
        self.resync(need)
        if len(self.pods) >= _TRIM_FROM:
            heap.give_back()

    def upsert(self, pod: ClusterPod) -> None:
        port = self.pods.get(pod.uid, ("", "", ""))[2]
        self.pods[pod.uid] = (pod.namespace, pod.name, port)
        if pod.needs_port and pod.uid not in self.written and \
                pod.uid not in self.retries.pending:
            self.batch.add(pod.uid)
        self._flush_if_due()

    def delete(self, pod: ClusterPod) -> None:
        port = self.pods.pop(pod.uid, ("", "", ""))[2]
        self.retries.pending.discard(pod.uid)
        self.batch.discard(pod.uid)
        self.written.discard(pod.uid)
        self.retries.release(pod, lambda: self.owned.release(
            pod, port, look_up=self.uncertain))
        self._flush_if_due()

    # -- steps --------------------------------------------------------------------------
    def _flush_if_due(self) -> None:
        if self.batch.due():
            uids = self.batch.take()
            if self.uncertain:
                self.resync(set(uids))
            else:
                self._create_and_write(uids, [])

    def resync(self, need: set[str]) -> None:
        """One filtered list of our ports: adopt, de-duplicate and sweep;
        then create the ports ``need`` still lacks and write the PodPorts
        not yet written (see the module)."""
        assert self.cloud is not None
        self._swept_at = time.monotonic()
        try:
            listed = self.owned.listed()
        except (osa.OpenStackError, k8s.K8sError) as exc:
            # Only pods still without their PodPort wait for the next try.
            self.retries.failed(need - self.written, exc, self.pods)
            LOG.warning("port resync postponed: %s", exc)
            return
        self.uncertain = False
        self.retries.pending -= need    # failures below put them back
        listed = self.pools.adopt(listed)   # pool ports: the pool's
        listing = portresync.by_device(listed)
        del listed
        create, write = portresync.plan(need, self.pods, self.written, listing)
        portresync.sweep(self.cloud, listing, self.pods, self._beat)
        self._create_and_write(create, write)

    def _create_and_write(self, create: list[str],
                          write: list[tuple[str, osa.Port]]) -> None:
        """Ports for ``create`` (in bulk), then PodPorts for those and for
        ``write`` (ports that already existed)."""
        assert self.cloud is not None
        adopted = {uid for uid, _ in write}
        served = self.pools.serve(create, self.pods, beat=self._beat)
        write, create = write + served.taken, served.rest
        for uid, error in served.failed.items():   # the claim may commit
            self.uncertain = True
            self.retries.failed([uid], error, self.pods)
        devices = [(f"kuryr-{self.pods[u][0]}-{self.pods[u][1]}"[:255], u)
                   for u in create if u in self.pods]
        if devices:
            try:
                made, failed = portbatch.create(
                    self.cloud, devices, network_id=self.owned.network_id,
                    subnet_id=self.subnet_id, tag=self.owned.cluster_tag())
            except OUTAGES as exc:         # the cluster tag: nothing made
                made, failed = {}, dict.fromkeys(create, exc)
            if made:
                LOG.info("created %d of %d ports asked in bulk", len(made),
                         len(devices))
            for uid, error in failed.items():
                if not isinstance(error, (osa.OpenStackRefused, k8s.K8sError)):
                    self.uncertain = True       # the answer was lost
                self.retries.failed([uid], error, self.pods)
            for uid, port in made.items():
                if uid in self.pods:
                    ns, name, _ = self.pods[uid]
                    self.pods[uid] = (ns, name, port.id)
                    write.append((uid, port))
        self._write(write, adopted)

    def _write(self, write: list[tuple[str, osa.Port]],
               adopted: set[str]) -> None:
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
        if self._writer is None:
            self._writer = PodPortWriter(self.client)
        for uid, error in self._writer.write_all(items, self._beat,
                                                  adopted=adopted).items():
            if error is None:
                self.written.add(uid)
                self.retries.succeeded(uid)
            else:
                self.retries.failed([uid], error, self.pods)
