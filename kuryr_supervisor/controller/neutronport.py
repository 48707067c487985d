"""The built-in handler: one Neutron port per pod, announced on the pod.

It lists, then watches, every pod of the cluster. For each pod on the pod
network it makes sure a Neutron port exists, then writes the port's address,
MAC and gateway to the pod's annotation (:mod:`..kubernetes.portannotation`),
which the CNI role binds. When the pod is deleted its port is deleted; a
periodic sweep deletes the controller's ports whose pod is gone (deleted
while no controller ran).

Idempotency, so a handler killed at any instant leaks and doubles nothing:
a port is found by its ``device_id`` (the pod UID) with the controller's
``device_owner`` before one is created, so a port created just before a
kill is adopted by the next run; if two exist (a race with a second
replica) the oldest is kept and the others deleted; the annotation is
patched with the pod UID as precondition, so it never lands on a new pod of
the same name.

Failures: a Kubernetes, Keystone or Neutron outage, or an exhausted port
quota, is not the handler's fault: the pod is retried with backoff and
readiness names the dependency. Anything else counts against the handler's
failure budget.
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
from kuryr_supervisor.kubernetes.clusterpods import ClusterPod, ClusterPods
from kuryr_supervisor.kubernetes.podwatch import PodSink, PodSource, PodWatch
from kuryr_supervisor.kubernetes.portannotation import ANNOTATION, PortAnnotation

LOG = logging.getLogger(__name__)

_RETRY_MIN, _RETRY_MAX = 0.5, 30.0
_OUTAGES = (osa.OpenStackUnavailable, osa.QuotaExceeded, k8s.K8sTemporary)


def annotated(pod: ClusterPod) -> bool:
    """The pod already carries a valid annotation for its own UID."""
    text = pod.annotations.get(ANNOTATION)
    if text is None:
        return False
    try:
        return PortAnnotation.parse(text).pod_uid == pod.uid
    except ValueError:
        return False


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
        self._step(pod, self._release)

    # -- steps --------------------------------------------------------------------------
    def _handle(self, pod: ClusterPod) -> None:
        if not pod.needs_port or annotated(pod):
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
            # 404: the pod is gone; 409: replaced under the same name. The
            # DELETED event or the sweep removes its port.
            LOG.info("pod %s/%s changed under us (%s); its port is left to "
                     "the sweep", pod.namespace, pod.name, exc.status)
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

    def _ensure(self, pod: ClusterPod) -> None:
        """Find or create the pod's port, then annotate the pod."""
        assert self.cloud is not None and self.client is not None
        ports = self.cloud.ports_of(pod.uid)
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
                device_id=pod.uid)
            LOG.info("created port %s (%s) for pod %s/%s", port.id, port.ip,
                     pod.namespace, pod.name)
        self._beat()
        if port.ip is None:
            raise ValueError(f"port {port.id} has no IPv4 address")
        subnet = self._subnet(port.subnet_id)
        if subnet.gateway is None:
            raise ValueError(f"subnet {subnet.id} has no gateway")
        note = PortAnnotation(
            port_id=port.id, pod_uid=pod.uid, mac=port.mac.lower(),
            address=ipaddress.IPv4Interface(f"{port.ip}/{subnet.cidr.prefixlen}"),
            gateway=subnet.gateway)
        self.client.annotate_pod(pod.namespace, pod.name, pod.uid,
                                 {ANNOTATION: note.to_json()})
        self.pending.pop(pod.uid, None)

    def _subnet(self, subnet_id: str) -> osa.Subnet:
        assert self.cloud is not None
        if subnet_id not in self._subnets:
            self._subnets[subnet_id] = self.cloud.subnet(subnet_id)
            self._beat()
        return self._subnets[subnet_id]

    def _release(self, pod: ClusterPod) -> None:
        assert self.cloud is not None
        for port in self.cloud.ports_of(pod.uid):
            self.cloud.delete_port(port.id)
            LOG.info("deleted port %s of pod %s/%s", port.id, pod.namespace,
                     pod.name)

    def sweep(self) -> None:
        """Delete the controller's ports whose pod no longer exists."""
        assert self.cloud is not None
        self._swept_at = time.monotonic()
        try:
            ports = self.cloud.owned_ports()
            for port in ports:
                if port.device_id not in self.known:
                    self.cloud.delete_port(port.id)
                    LOG.info("deleted leaked port %s (pod %s is gone)",
                             port.id, port.device_id)
                    self._beat()
        except osa.OpenStackError as exc:
            LOG.warning("port sweep postponed: %s", exc)
