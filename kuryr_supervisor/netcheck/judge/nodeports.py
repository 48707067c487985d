"""The nodes' own ports into the pod network: one per node, made as the
canaries are.

On the OVS binding a pod's packets never cross its node's network stack;
the node (where the kubelet runs its probes) reaches its pods, and they
reach it, through a Neutron port of its own, bound to it, which the node
plugs as an OVS internal port in its own namespace (OVN-Kubernetes'
management port; the node's side: :mod:`kuryr_supervisor.netcheck.node.
nodeport`). A family of per-node ports (:mod:`.pernode`: made, found,
tagged and reclaimed as the canaries), tagged with :data:`NODE_PORT_TAG`
under a ``device_owner`` of its own (:data:`~kuryr_supervisor.controller.
openstack.adapter.NODE_OWNER`), so the port handler and the canaries never
see it, and in the nodes' security group (:mod:`.nodegroups`, ensured
before any is made), which the pods' group admits. Where the ``services``
handler runs, what a node is told of its port carries the service
subnet's range (``serviceCIDR``), which the node routes through it.
"""
from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Collection

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.netcheck.codecs.nodeportspec import (
    NodePort,
    service_range,
)
from kuryr_supervisor.netcheck.judge import pernode
from kuryr_supervisor.netcheck.judge.nodegroups import NodeGroups
from kuryr_supervisor.netcheck.judge.pernode import Family, PerNodePorts

LOG = logging.getLogger(__name__)

#: Tag of every node port, beside the cluster tag.
NODE_PORT_TAG = "kuryr-supervisor-node-port"
NODE_PORT = Family(what="node port", tag=NODE_PORT_TAG, owner=osa.NODE_OWNER,
                   prefix="kuryr-node:", kind="node")


def device_id(node: str) -> str:
    """The node port's ``device_id`` for ``node``."""
    return pernode.device_id(NODE_PORT, node)


class NodePorts(PerNodePorts):
    """The node ports' family (see the module); ``groups``: the nodes'
    security group, ensured before a port is made; ``service_subnet_id``:
    the ``services`` handler's service subnet (empty: none)."""

    def __init__(self, cloud: osa.OpenStack, client: k8s.K8sClient, *,
                 network_id: str, subnet_id: str, groups: NodeGroups,
                 project_id: str = "", cluster_id: str = "",
                 service_subnet_id: str = "",
                 beat: Callable[[], None] = lambda: None) -> None:
        super().__init__(cloud, client, NODE_PORT, network_id=network_id,
                         subnet_id=subnet_id, project_id=project_id,
                         cluster_id=cluster_id, beat=beat,
                         groups=lambda project, tag: self._ids)
        self.groups = groups
        self._ids: list[str] = []
        self.service_subnet_id = service_subnet_id
        self._said = ""

    def assigned(self, node: str) -> NodePort | None:
        """What ``node``'s record says of its port (see
        :meth:`.PerNodePorts.assigned`), with the service range."""
        port = super().assigned(node)
        if port is None:
            return None
        return NodePort(port.port_id, port.mac, port.address, port.gateway,
                        self.service_cidr(port.address))

    def service_cidr(self, address: ipaddress.IPv4Interface
                     ) -> ipaddress.IPv4Network | None:
        """The service subnet's range to route through the node ports
        (None: no services handler, or a range a node would refuse: said
        once, the ports still named without it)."""
        if not self.service_subnet_id:
            return None
        subnet = self._subnets.get(self.service_subnet_id)
        if subnet is None:
            subnet = self._subnets[self.service_subnet_id] = \
                self.cloud.subnet(self.service_subnet_id)
        try:
            cidr = service_range(str(subnet.cidr), "the service subnet")
            if cidr.overlaps(address.network):
                raise ValueError(f"the service subnet {cidr} overlaps the "
                                 "pod subnet")
        except ValueError as exc:
            if str(exc) != self._said:
                LOG.warning("node ports: no service route: %s", exc)
                self._said = str(exc)
            return None
        return cidr

    def reconcile(self, nodes: Collection[str]) -> int:
        """The nodes' group and its rules first (every pass while a node
        is served: a rule deleted behind our back is made again), then
        the ports (:meth:`.PerNodePorts.reconcile`)."""
        if nodes:
            self._ids = self.groups.ensure(self.project(),
                                           self.cluster_tag())
        return super().reconcile(nodes)

    def release(self) -> int:
        """Every node port of the cluster deleted, then the nodes'
        group; how many ports."""
        deleted = self.reconcile(())
        self.groups.release(self.project(), self.cluster_tag())
        return deleted
