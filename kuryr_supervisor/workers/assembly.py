"""Builds the CNI service from the configuration, for every process that
touches pods' network state.

The Server serves it; the Watcher releases leaked allocations through the
same service (the same path as CNI GC, under the container's lock), so the
two processes never race on one container. In Kubernetes mode the service
also gets the pod guard (ADD for a pod the API says is gone fails fast) and,
with ``[ipam] use_node_pod_cidr``, the Node's podCIDR as its subnet.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import time
from collections.abc import Callable

from oslo_config import cfg

from kuryr_supervisor import errors
from kuryr_supervisor.cni import binding as bindings
from kuryr_supervisor.cni import protocol
from kuryr_supervisor.cni.binding.portready import PortReady
from kuryr_supervisor.cni.ipam import Allocation, IpamStore, PodRef
from kuryr_supervisor.cni.ipam.external import (
    Activated,
    ExternalIpam,
    FixedAddress,
    Lookup,
)
from kuryr_supervisor.cni.locks import ContainerLocks
from kuryr_supervisor.cni.ports import Ipam, LazyIpam
from kuryr_supervisor.cni.service import CNIService, PodCheck
from kuryr_supervisor.conf import cni_daemon as cni_conf
from kuryr_supervisor.conf import ipam as ipam_conf
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes import nodes, podport
from kuryr_supervisor.kubernetes.registry import PodChecker, PodRegistry, registry_path
from kuryr_supervisor.kubernetes.resource import getter
from kuryr_supervisor.kubernetes.wire import pod_from_json
from kuryr_supervisor.state import SharedState

LOG = logging.getLogger(__name__)

SubnetProvider = Callable[[], "ipaddress.IPv4Network | None"]


def locks_dir(conf: cfg.ConfigOpts) -> str:
    """Where the per-container lock files live (shared by all workers)."""
    return os.path.join(conf.ipam.state_dir, "locks")


def build_service(conf: cfg.ConfigOpts, state: SharedState | None, *,
                  pod_check: PodCheck | None = None,
                  subnet: SubnetProvider | None = None,
                  lookup: Lookup | None = None,
                  bound: Callable[[PodRef], None] | None = None,
                  activated: Activated | None = None,
                  binding: bindings.BridgeBinding | bindings.OvsBinding
                  | None = None) -> CNIService:
    """The CNI service as configured.

    ``pod_check`` (raises ``errors.PodGone``) runs on ADD before allocating;
    ``subnet`` replaces [ipam] subnet, e.g. with the Node's podCIDR (return
    None while unknown: ADD then answers code 11, STATUS code 50);
    ``lookup`` makes addresses come from elsewhere (the controller's
    PodPort) instead of the embedded IPAM, and ``bound`` tells that source
    a pod holds its address; ``activated`` waits, once the pod is plumbed,
    until its port is wired; ``binding``: the one built from the
    configuration unless given.
    """
    settings = ipam_conf.settings(conf)

    def open_store(net: ipaddress.IPv4Network) -> Ipam:
        same = net == settings.subnet
        store = IpamStore(settings.db_path, net,
                          gateway=settings.gateway if same else None,
                          range_start=settings.range_start if same else None,
                          range_end=settings.range_end if same else None)
        if lookup is None:
            return store
        return ExternalIpam(store, lookup, timeout=lambda: float(
            conf.cni_daemon.annotation_timeout), bound=bound,
            activated=activated,
            network_from_port=conf.binding.driver == "ovs")

    binding = binding or bindings.from_conf(conf)
    return CNIService(
        LazyIpam(open_store, subnet or (lambda: settings.subnet)), binding,
        ContainerLocks(locks_dir(conf)), state,
        lock_timeout=conf.cni_daemon.request_timeout, pod_check=pod_check,
        netns_guard=protocol.host_netns_guard)


def build_server_service(conf: cfg.ConfigOpts, state: SharedState, *,
                         master_pid: int | None = None) -> CNIService:
    """The Server's service: with the Kubernetes hooks when configured
    (``master_pid``: the daemon's, named in its client's User-Agent)."""
    if not k8s.is_configured(conf):
        return build_service(conf, state)
    client = k8s.K8sClient.from_conf(conf, master_pid=master_pid)
    registry = PodRegistry(registry_path(conf.ipam.state_dir))
    checker = PodChecker(registry, get_pod=getter(client.pods, pod_from_json))
    subnet = node_pod_cidr(client) if conf.ipam.use_node_pod_cidr else None
    # "annotation" is the deprecated name of "podport": the pod's own
    # annotation is never read (its owner can write it).
    # With OVS the port is wired only once it is plugged (the node's OVN
    # controller or agent claims it from the bridge): waited for after
    # plumbing (portready: ovn-installed, or ACTIVE in the PodPort). The
    # Linux bridge binding keeps waiting before.
    after = conf.binding.driver == "ovs"
    lookup = (podport_lookup(client, active=lambda: (
        cni_conf.wait_for_active(conf) and not after))
        if conf.cni_daemon.address_source in ("podport", "annotation")
        else None)
    binding = bindings.from_conf(conf)
    activated: Activated | None = None
    if lookup is not None and isinstance(binding, bindings.OvsBinding):
        activated = PortReady(conf, binding, podport_activated(
            client, enabled=lambda: cni_conf.wait_for_active(conf)))
    return build_service(conf, state, pod_check=checker.check_pod,
                         subnet=subnet, lookup=lookup,
                         bound=podport_bound(client) if lookup else None,
                         activated=activated, binding=binding)


def podport_lookup(client: k8s.K8sClient, *,
                   active: Callable[[], bool] = lambda: False) -> Lookup:
    """The pod's address from the PodPort the controller writes (never
    from anything the pod's owner can write), waiting on a watch of it. A
    runtime that leaves K8S_POD_UID out: the pod's UID is read from the
    API, so the PodPort is still held to this pod. ``active()`` (the
    ``wait_for_active_port`` option): wait until the PodPort says the port
    is ACTIVE; a port Neutron failed to bind is refused at once."""
    waits = {False: podport.status_waiter(client.podports, settled=False),
             True: podport.status_waiter(client.podports, settled=True)}

    def lookup(pod: PodRef, seconds: float) -> FixedAddress | None:
        api_uid = ""
        if not pod.uid:
            obj = client.pods.get(pod.name, namespace=pod.namespace)
            if obj is None:
                return None
            api_uid = pod_from_json(obj).uid
        try:
            found = waits[active()](pod.namespace, pod.name,
                                    pod.uid or api_uid, seconds)
        except podport.Invalid as exc:
            raise errors.InvalidConfig(
                f"PodPort {pod.namespace}/{pod.name} refused: {exc}") from exc
        if found is None:
            return None
        data, status = found
        if status == podport.BINDING_FAILED:
            raise errors.PortBindingFailed(
                f"Neutron failed to bind port {data.port_id} of pod "
                f"{pod.namespace}/{pod.name} (binding_failed); see the "
                f"pod's Events")
        return FixedAddress(data.address, data.gateway, data.mac,
                            pod_uid=data.pod_uid, port_id=data.port_id,
                            api_uid=api_uid)
    return lookup


def podport_activated(client: k8s.K8sClient, *,
                      enabled: Callable[[], bool] = lambda: True
                      ) -> Activated:
    """Wait, after plumbing, until the pod's PodPort says its port is
    ACTIVE (the controller keeps the status from Neutron; the node holds
    no OpenStack credentials). Every failure is code 11, never counted:
    BINDING_FAILED at once, not ACTIVE within ``seconds`` naming the last
    status seen, the API unreachable."""
    wait = podport.status_waiter(client.podports, settled=True)

    def activated(alloc: Allocation, seconds: float) -> None:
        if not enabled() or not alloc.port_id:
            return
        pod, port_id = alloc.pod, alloc.port_id
        where = f"port {port_id} of pod {pod.namespace}/{pod.name}"
        try:
            found = wait(pod.namespace, pod.name, pod.uid, seconds)
            last = "" if found else _last_status(client, pod)
        except podport.Invalid as exc:
            raise errors.InvalidConfig(
                f"PodPort {pod.namespace}/{pod.name} refused: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - the API is down: not ours
            raise errors.TryAgain(f"{where}: cannot read its PodPort to see "
                                  f"whether it is ACTIVE: {exc}") from exc
        if found is None:
            raise errors.PortNotActive(
                f"{where} is not ACTIVE after {seconds:.1f} s (PodPort "
                f"status {last or 'not reported'}); is the node's OVN "
                "controller or OVS agent running and is the port bound "
                "to this node?")
        data, status = found
        if data.port_id != port_id:
            raise errors.PortNotActive(
                f"{where}: the PodPort now names port {data.port_id}")
        if status == podport.BINDING_FAILED:
            raise errors.PortBindingFailed(
                f"Neutron failed to bind {where} (binding_failed); see the "
                "pod's Events")
    return activated


def _last_status(client: k8s.K8sClient, pod: PodRef) -> str:
    items = client.podports.page(
        namespace=pod.namespace,
        field_selector=f"metadata.name={pod.name}").items
    return podport.port_status(items[0]) if items else "no PodPort"


def podport_bound(client: k8s.K8sClient) -> Callable[[PodRef], None]:
    """Record in the pod's PodPort that the pod holds its address
    (``status.boundAt``, once): the controller never changes a bound
    PodPort."""
    def bound(pod: PodRef) -> None:
        client.podports.patch(pod.name, podport.status_patch({
            "boundAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}),
            namespace=pod.namespace, subresource="status")
    return bound


#: The old name, kept for importers.
annotation_lookup = podport_lookup


def node_pod_cidr(client: k8s.K8sClient) -> SubnetProvider:
    """The Node's spec.podCIDR, asked until known (then kept by LazyIpam)."""
    def provider() -> ipaddress.IPv4Network | None:
        try:
            cidr = nodes.pod_cidr(client.nodes.get(client.node))
        except k8s.K8sError as exc:
            LOG.warning("cannot read this Node's podCIDR yet: %s", exc)
            return None
        if cidr is None:
            LOG.warning("this Node has no spec.podCIDR yet")
            return None
        return ipaddress.IPv4Network(cidr)
    return provider


def allocation_hooks(conf: cfg.ConfigOpts
                     ) -> tuple[Callable[[], list[Allocation]],
                                Callable[[Allocation], None]]:
    """(list, release) for the Watcher's reclaim, through the service, so a
    release takes the container's lock and never races the Server."""
    service = build_service(conf, None)

    # The store is closed after each use: the Watcher may exit at any time
    # without closing, and an open connection would keep -wal behind.
    def listing() -> list[Allocation]:
        try:
            return service.allocations()
        finally:
            service.close(final=False)

    def release(alloc: Allocation) -> None:
        try:
            service.forget(alloc.container_id, alloc.ifname, alloc.netns,
                           created=alloc.created)
        finally:
            service.close(final=False)
    return listing, release
