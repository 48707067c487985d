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

Trust: Neutron is the only proof that a port exists; nothing a tenant can
write (the pod's annotations) is read. Every port created carries the
cluster tag, and only ports with that tag, on the pod network, in the
project are ever adopted or deleted.

Idempotency, so a handler killed at any instant leaks and doubles nothing:
a port created just before a kill is found by the next run's resync and
adopted; a bulk create whose answer was lost makes the next attempt resync
first; a PodPort is replaced only with the resourceVersion read as
precondition. Per pod the handler keeps the UID, namespace, name and port
id (one tuple), and the UID in a set once its PodPort is written.

Failures: a Kubernetes, Keystone or Neutron outage (a timeout, a 5xx, an
answer that is not JSON), or an exhausted port quota, is not the handler's
fault: the pod is retried with backoff and readiness names the dependency.
Anything else counts against the handler's failure budget.
"""
from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import cast

from kuryr_supervisor.controller import heap, portbatch, portresync
from kuryr_supervisor.controller import openstack as osa
from kuryr_supervisor.controller.handlers import HandlerContext
from kuryr_supervisor.controller.podportwriter import PodPortWriter
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes import podport
from kuryr_supervisor.kubernetes.clusterpods import ClusterPod, ClusterPods
from kuryr_supervisor.kubernetes.podwatch import PodSink, PodSource, PodWatch

LOG = logging.getLogger(__name__)

_RETRY_MIN, _RETRY_MAX = 0.5, 30.0
#: A relist of this many pods or more hands freed heap back (see below).
_TRIM_FROM = 1000
_OUTAGES = (osa.OpenStackUnavailable, osa.QuotaExceeded, k8s.K8sTemporary)


class NeutronPortHandler:
    """See the module docstring. ``client`` and ``cloud`` default to the
    configured Kubernetes and OpenStack adapters."""

    def __init__(self, ctx: HandlerContext, *, client: k8s.K8sClient | None = None,
                 cloud: osa.OpenStack | None = None) -> None:
        self.ctx = ctx
        self.client = client
        self.cloud = cloud
        opts = ctx.conf.controller
        self.network_id, self.subnet_id = opts.pod_network_id, opts.pod_subnet_id
        #: uid -> (namespace, name, port id or "") of every live pod
        self.pods: dict[str, tuple[str, str, str]] = {}
        self.written: set[str] = set()            # uids with their PodPort
        self.pending: set[str] = set()            # uids to retry
        self.batch = portbatch.Batch()
        #: Neutron may hold ports we do not know of (a lost answer, or not
        #: listed yet): list before creating.
        self.uncertain = True
        self.tag = (osa.cluster_tag(opts.cluster_id) if opts.cluster_id
                    else "")
        self._subnets: dict[str, osa.Subnet] = {}
        self._retry_delay = _RETRY_MIN
        self._retry_at = 0.0
        self._swept_at = 0.0
        self._beat: Callable[[], None] = lambda: None
        self._outage: str | None = None
        self._writer: PodPortWriter | None = None

    # -- running -----------------------------------------------------------------
    def run(self, stopping: threading.Event, beat: Callable[[], None]) -> None:
        conf = self.ctx.conf
        self._beat = beat
        if self.client is None:
            self.client = k8s.K8sClient.from_conf(conf)
        if self.cloud is None:
            self.cloud = osa.OpenStack.from_conf(conf)
        self.cloud.beat = beat
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

    def tick(self) -> None:
        """Heartbeat, then a due batch, retries and the periodic resync."""
        self._beat()
        self._flush_if_due()
        now = time.monotonic()
        if self.pending and now >= self._retry_at:
            self.resync(set(self.pending))
            self._retry_delay = (_RETRY_MIN if not self.pending else
                                 min(_RETRY_MAX, self._retry_delay * 2))
            self._retry_at = time.monotonic() + self._retry_delay
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
        self.pending &= need
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
                pod.uid not in self.pending:
            self.batch.add(pod.uid)
        self._flush_if_due()

    def delete(self, pod: ClusterPod) -> None:
        port = self.pods.pop(pod.uid, ("", "", ""))[2]
        self.pending.discard(pod.uid)
        self.batch.discard(pod.uid)
        self.written.discard(pod.uid)
        self._step(pod, port)
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
            listed = self._owned_ports()
        except (osa.OpenStackError, k8s.K8sError) as exc:
            # Only pods still without their PodPort wait for the next try.
            self._failed(need - self.written, exc)
            LOG.warning("port resync postponed: %s", exc)
            return
        self.uncertain = False
        self.pending -= need            # failures below put them back
        listing = portresync.by_device(listed)
        del listed
        create, write = portresync.plan(need, self.pods, self.written, listing)
        portresync.sweep(self.cloud, listing, self.pods, self._beat)
        self._create_and_write(create, write)

    def _owned_ports(self) -> list[osa.Port]:
        assert self.cloud is not None
        project = (str(self.ctx.conf.controller.project_id)
                   or self.cloud.token().project_id)
        if not project:
            raise osa.OpenStackUnavailable("no project id")
        return self.cloud.owned_ports(network_id=self.network_id,
                                      tag=self._cluster_tag(), project_id=project)

    def _create_and_write(self, create: list[str],
                          write: list[tuple[str, osa.Port]]) -> None:
        """Ports for ``create`` (in bulk), then PodPorts for those and for
        ``write`` (ports that already existed)."""
        assert self.cloud is not None
        adopted = {uid for uid, _ in write}
        devices = [(f"kuryr-{self.pods[u][0]}-{self.pods[u][1]}"[:255], u)
                   for u in create if u in self.pods]
        if devices:
            try:
                made, failed = portbatch.create(
                    self.cloud, devices, network_id=self.network_id,
                    subnet_id=self.subnet_id, tag=self._cluster_tag())
            except _OUTAGES as exc:         # the cluster tag: nothing made
                made, failed = {}, dict.fromkeys(create, exc)
            if made:
                LOG.info("created %d of %d ports asked in bulk", len(made),
                         len(devices))
            for uid, error in failed.items():
                if not isinstance(error, (osa.OpenStackRefused, k8s.K8sError)):
                    self.uncertain = True       # the answer was lost
                self._failed([uid], error)
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
                data = self._data(uid, port)
            except Exception as exc:  # noqa: BLE001 - counted per pod below
                self._failed([uid], exc)
                continue
            items.append((uid, *self.pods[uid][:2], data))
        if self._writer is None:
            self._writer = PodPortWriter(self.client)
        for uid, error in self._writer.write_all(items, self._beat,
                                                  adopted=adopted).items():
            if error is None:
                self.written.add(uid)
                self.pending.discard(uid)
                self._succeeded()
            else:
                self._failed([uid], error)

    def _data(self, uid: str, port: osa.Port) -> podport.PortData:
        if port.ip is None:
            raise ValueError(f"port {port.id} has no IPv4 address")
        subnet = self._subnet(port.subnet_id)
        if subnet.gateway is None:
            raise ValueError(f"subnet {subnet.id} has no gateway")
        return podport.PortData(
            port_id=port.id, pod_uid=uid, mac=port.mac.lower(),
            address=ipaddress.IPv4Interface(f"{port.ip}/{subnet.cidr.prefixlen}"),
            gateway=subnet.gateway)

    def _failed(self, uids: Iterable[str], exc: BaseException) -> None:
        """Outages and conflicts: retried; other refusals by the API: left
        to the next event; anything else: retried and counted."""
        uids = [u for u in uids if u in self.pods]
        if uids and not self.pending:       # the first to wait: not at once
            self._retry_at = time.monotonic() + self._retry_delay
        if isinstance(exc, _OUTAGES):
            self.pending.update(uids)
            if self._outage is None and uids:
                LOG.warning("pod ports wait for a dependency: %s", exc)
            self._outage = str(exc)
            return
        for uid in uids:
            ns, name, _ = self.pods[uid]
            if isinstance(exc, k8s.K8sPermanent) and exc.status == 409:
                self.pending.add(uid)   # the PodPort changed: read it again
            elif isinstance(exc, k8s.K8sPermanent):
                # 404: the pod or its namespace is gone; 403/422: RBAC or
                # the CRD, named.
                LOG.warning("pod %s/%s: the API refused its PodPort (%s); "
                            "left to the next event", ns, name, exc)
                self.pending.discard(uid)
            else:
                self.pending.add(uid)
                count = self.ctx.failed()
                LOG.error("handling pod %s/%s failed (%d consecutive): %s",
                          ns, name, count, exc)

    def _succeeded(self) -> None:
        if self._outage is not None:
            LOG.info("dependencies answer again")
            self._outage = None
        self.ctx.succeeded()

    def _step(self, pod: ClusterPod, port_id: str) -> None:
        """Release a deleted pod's PodPort and port; outages are logged
        (the resync sweeps what is left)."""
        try:
            self._release(pod, port_id)
        except (osa.OpenStackError, k8s.K8sError) as exc:
            LOG.warning("pod %s/%s: release left to the sweep: %s",
                        pod.namespace, pod.name, exc)
            return
        except Exception:  # noqa: BLE001 - counted; one pod never stops the loop
            count = self.ctx.failed()
            LOG.exception("releasing pod %s/%s failed (%d consecutive)",
                          pod.namespace, pod.name, count)
            return
        self._succeeded()

    def _cluster_tag(self) -> str:
        """``kuryr-supervisor:<cluster_id>``; by default the kube-system
        namespace's UID, read once (an API outage is retried)."""
        if not self.tag:
            assert self.client is not None
            uid = self.client.namespace_uid("kube-system")
            if not uid:
                raise k8s.K8sTemporary("kube-system has no UID yet")
            self.tag = osa.cluster_tag(uid)
            LOG.info("cluster id: %s (kube-system's UID)", uid)
        return self.tag

    def _subnet(self, subnet_id: str) -> osa.Subnet:
        assert self.cloud is not None
        if subnet_id not in self._subnets:
            self._subnets[subnet_id] = self.cloud.subnet(subnet_id)
            self._beat()
        return self._subnets[subnet_id]

    def _release(self, pod: ClusterPod, port_id: str) -> None:
        """Delete the PodPort (Kubernetes' garbage collector would too:
        ownerReference) and the port: by id when known and Neutron holds no
        unknown ports, else looked up."""
        assert self.cloud is not None and self.client is not None
        current = self.client.get_podport(pod.namespace, pod.name)
        if current is not None and podport.owner_uid(current) == pod.uid:
            self.client.delete_podport(pod.namespace, pod.name, uid=str(
                (current.get("metadata") or {}).get("uid") or ""))
        ids = [port_id] if port_id and not self.uncertain else [
            p.id for p in self.cloud.ports_of(pod.uid, network_id=self.network_id,
                                              tag=self._cluster_tag())]
        for port in ids:
            if self.cloud.delete_port(port):
                LOG.info("deleted port %s of pod %s/%s", port, pod.namespace,
                         pod.name)

