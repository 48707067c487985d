"""The built-in handler: one Neutron port per pod, announced in a PodPort.

It lists, then watches, every pod of the cluster. For each pod on the pod
network it makes sure a Neutron port exists, then writes the port's address,
MAC and gateway to the pod's PodPort (:mod:`..kubernetes.podport`), which
only the controller may write and the CNI role binds. When the pod is
deleted its port and PodPort are deleted; a periodic sweep deletes the
controller's ports whose pod is gone (deleted while no controller ran).

Trust: Neutron is the only proof that a port exists. A port is looked up by
Neutron filters (``device_id`` = the pod UID, the controller's
``device_owner``, the cluster tag ``kuryr-supervisor:<cluster_id>``, the
pod network) before one is created; nothing a tenant can write (the pod's
annotations) is ever read. Every port created carries the cluster tag, and
the sweep lists only ports with that tag, on the pod network, in the
project, so another cluster's ports sharing the project are never touched.

Idempotency, so a handler killed at any instant leaks and doubles nothing:
a port created just before a kill is found by that lookup and adopted by
the next run; if two exist (a race with a second replica) the oldest is kept
and the others deleted; a PodPort is replaced only with the resourceVersion
read as precondition. Per pod the handler keeps only the pod and, once its
PodPort is written, its UID in a set.

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

from kuryr_supervisor.controller import openstack as osa
from kuryr_supervisor.controller.handlers import HandlerContext
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes import podport
from kuryr_supervisor.kubernetes.clusterpods import ClusterPod, ClusterPods
from kuryr_supervisor.kubernetes.podwatch import PodSink, PodSource, PodWatch

LOG = logging.getLogger(__name__)

_RETRY_MIN, _RETRY_MAX = 0.5, 30.0
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
        self.known: dict[str, ClusterPod] = {}        # uid -> live pod
        self.pending: dict[str, ClusterPod] = {}      # uid -> to retry
        self.written: set[str] = set()                # uids with a PodPort
        self.tag = (osa.cluster_tag(opts.cluster_id) if opts.cluster_id
                    else "")
        self._subnets: dict[str, osa.Subnet] = {}
        self._retry_delay = _RETRY_MIN
        self._retry_at = 0.0
        self._swept_at = 0.0
        self._beat: Callable[[], None] = lambda: None
        self._outage: str | None = None

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
            cast(PodSource, ClusterPods(self.client)), cast(PodSink, self),
            heartbeat=self.tick,
            heartbeat_interval=float(conf.supervisor.heartbeat_interval),
            backoff_max=float(conf.watcher.backoff_max),
            stall_timeout=self.client.watch_read_timeout + 5.0,
            on_synced=lambda: self.ctx.ready(True))
        watch.run(stopping)

    def tick(self) -> None:
        """Heartbeat, then retries and the periodic sweep when due."""
        self._beat()
        now = time.monotonic()
        if self.pending and now >= self._retry_at:
            for pod in list(self.pending.values()):
                self._handle(pod)
                self._beat()
            self._retry_delay = (_RETRY_MIN if not self.pending else
                                 min(_RETRY_MAX, self._retry_delay * 2))
            self._retry_at = time.monotonic() + self._retry_delay
        if self._swept_at and now - self._swept_at >= float(
                self.ctx.conf.controller.resync_interval):
            self.sweep()

    # -- PodWatch's sink -------------------------------------------------------------
    def replace_all(self, pods: Iterable[ClusterPod], resource_version: str) -> None:
        self.known = {p.uid: p for p in pods}
        self.pending = {u: p for u, p in self.pending.items() if u in self.known}
        self.written &= set(self.known)
        for pod in list(self.known.values()):
            self._handle(pod)
            self._beat()
        self.sweep()

    def upsert(self, pod: ClusterPod) -> None:
        self.known[pod.uid] = pod
        self._handle(pod)

    def delete(self, pod: ClusterPod) -> None:
        self.known.pop(pod.uid, None)
        self.pending.pop(pod.uid, None)
        self.written.discard(pod.uid)
        self._step(pod, self._release)

    # -- steps --------------------------------------------------------------------------
    def _handle(self, pod: ClusterPod) -> None:
        if not pod.needs_port or pod.uid in self.written:
            self.pending.pop(pod.uid, None)
            return
        self._step(pod, self._ensure)

    def _step(self, pod: ClusterPod, work: Callable[[ClusterPod], None]) -> None:
        """Run one step; outages and failures leave the pod to retry."""
        try:
            work(pod)
        except _OUTAGES as exc:
            self._retry(pod, work)
            if self._outage is None:
                LOG.warning("pod ports wait for a dependency: %s", exc)
            self._outage = str(exc)
            return
        except k8s.K8sPermanent as exc:
            if exc.status == 409:
                # The PodPort changed while being replaced: read it again.
                self._retry(pod, work)
                return
            # 404: the pod or its namespace is gone (the DELETED event or
            # the sweep removes its port); 403/422: RBAC or the CRD, named.
            LOG.warning("pod %s/%s: the API refused its PodPort (%s); left "
                        "to the next event and the sweep", pod.namespace,
                        pod.name, exc)
            self.pending.pop(pod.uid, None)
            return
        except Exception:  # noqa: BLE001 - counted; one pod never stops the loop
            self._retry(pod, work)
            count = self.ctx.failed()
            LOG.exception("handling pod %s/%s failed (%d consecutive)",
                          pod.namespace, pod.name, count)
            return
        if self._outage is not None:
            LOG.info("dependencies answer again")
            self._outage = None
        self.ctx.succeeded()

    def _retry(self, pod: ClusterPod, work: Callable[[ClusterPod], None]) -> None:
        if work == self._ensure and pod.uid in self.known:
            self.pending[pod.uid] = pod

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

    def _ensure(self, pod: ClusterPod) -> None:
        """Find (in Neutron) or create the pod's port, then write its
        PodPort."""
        assert self.cloud is not None and self.client is not None
        tag = self._cluster_tag()
        ports = self.cloud.ports_of(pod.uid, network_id=self.network_id,
                                    tag=tag)
        self._beat()
        if ports:
            port = ports[0]
            for extra in ports[1:]:
                LOG.warning("pod %s/%s had %d ports; deleting %s", pod.namespace,
                            pod.name, len(ports), extra.id)
                self.cloud.delete_port(extra.id)
        else:
            port = self.cloud.create_port(
                network_id=self.network_id, subnet_id=self.subnet_id,
                name=f"kuryr-{pod.namespace}-{pod.name}"[:255],
                device_id=pod.uid, tags=[tag])
            LOG.info("created port %s (%s) for pod %s/%s", port.id, port.ip,
                     pod.namespace, pod.name)
        self._beat()
        if port.ip is None:
            raise ValueError(f"port {port.id} has no IPv4 address")
        subnet = self._subnet(port.subnet_id)
        if subnet.gateway is None:
            raise ValueError(f"subnet {subnet.id} has no gateway")
        data = podport.PortData(
            port_id=port.id, pod_uid=pod.uid, mac=port.mac.lower(),
            address=ipaddress.IPv4Interface(f"{port.ip}/{subnet.cidr.prefixlen}"),
            gateway=subnet.gateway)
        self._write_podport(pod, data)
        self.written.add(pod.uid)
        self.pending.pop(pod.uid, None)

    def _write_podport(self, pod: ClusterPod, data: podport.PortData) -> None:
        """Create the PodPort, or replace one that says otherwise (an
        earlier pod's of the same name), the version read as precondition."""
        assert self.client is not None
        obj = podport.body(pod.namespace, pod.name, data)
        try:
            self.client.create_podport(pod.namespace, obj)
            return
        except k8s.K8sPermanent as exc:
            if exc.status != 409:
                raise
        current = self.client.get_podport(pod.namespace, pod.name)
        if current is None:
            raise k8s.K8sTemporary("PodPort vanished while being written")
        if podport.same(current, data):
            return
        obj["metadata"]["resourceVersion"] = (
            current.get("metadata") or {}).get("resourceVersion", "")
        self.client.replace_podport(pod.namespace, pod.name, obj)

    def _subnet(self, subnet_id: str) -> osa.Subnet:
        assert self.cloud is not None
        if subnet_id not in self._subnets:
            self._subnets[subnet_id] = self.cloud.subnet(subnet_id)
            self._beat()
        return self._subnets[subnet_id]

    def _release(self, pod: ClusterPod) -> None:
        assert self.cloud is not None and self.client is not None
        current = self.client.get_podport(pod.namespace, pod.name)
        if current is not None and podport.owner_uid(current) == pod.uid:
            # Kubernetes' garbage collector does it too (ownerReference).
            self.client.delete_podport(pod.namespace, pod.name, uid=str(
                (current.get("metadata") or {}).get("uid") or ""))
        for port in self.cloud.ports_of(pod.uid, network_id=self.network_id,
                                        tag=self._cluster_tag()):
            self.cloud.delete_port(port.id)
            LOG.info("deleted port %s of pod %s/%s", port.id, pod.namespace,
                     pod.name)

    def sweep(self) -> None:
        """Delete the controller's ports whose pod no longer exists: only
        ports with this cluster's tag, on the pod network, in the project."""
        assert self.cloud is not None
        self._swept_at = time.monotonic()
        try:
            project = (str(self.ctx.conf.controller.project_id)
                       or self.cloud.token().project_id)
            if not project:
                LOG.warning("port sweep postponed: no project id")
                return
            ports = self.cloud.owned_ports(network_id=self.network_id,
                                           tag=self._cluster_tag(),
                                           project_id=project)
            for port in ports:
                if port.device_id not in self.known:
                    self.cloud.delete_port(port.id)
                    LOG.info("deleted leaked port %s (pod %s is gone)",
                             port.id, port.device_id)
                    self._beat()
        except (osa.OpenStackError, k8s.K8sError) as exc:
            LOG.warning("port sweep postponed: %s", exc)
