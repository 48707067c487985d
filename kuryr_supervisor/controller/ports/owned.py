"""The controller's own ports: which they are, what they say, how they go.

Only ports that carry the cluster tag (``kuryr-supervisor:<cluster_id>``),
on the pod network, in the project are the controller's: they alone are
listed, adopted and deleted. :class:`OwnedPorts` holds what scopes them
(the tag, by default the kube-system namespace's UID, read once; the
project, by default the token's) and what a PodPort says of one of them
(its address, MAC and the gateway of its subnet, each subnet read once),
and releases a deleted or finished pod's PodPort and ports.

Where Neutron drops a create's tags (no ``tag_ports_during_bulk_creation``)
a port is tagged after its create; one whose tag call was lost (the
controller died first) is found again by :meth:`OwnedPorts.listed` at the
first list of a process, and after a tag call failed: the ports on the
network, in the project, with the controller's owner and without the tag,
of which only those whose name carries the cluster's tag are tagged and
adopted (:meth:`~kuryr_supervisor.controller.openstack.making.PortMaker.
recognise`); any other is left alone, never deleted.

Trust: Neutron is the only proof that a port exists; nothing a tenant can
write (the pod's annotations) is read.
"""
from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterable

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack.making import PortMaker
from kuryr_supervisor.controller.pools import poolports
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes import nodes as k8s_nodes
from kuryr_supervisor.kubernetes import podport

LOG = logging.getLogger(__name__)


class OwnedPorts:
    """Scope and data of the controller's ports (see the module): on
    ``network_id``; ``project_id`` and ``cluster_id`` as configured ("":
    the defaults); ``beat`` is the handler's heartbeat."""

    def __init__(self, client: k8s.K8sClient, cloud: osa.OpenStack, *,
                 network_id: str, project_id: str = "", cluster_id: str = "",
                 beat: Callable[[], None],
                 maker: PortMaker | None = None) -> None:
        self.client, self.cloud, self._beat = client, cloud, beat
        self.network_id, self.project_id = network_id, project_id
        self.tag = osa.cluster_tag(cluster_id) if cluster_id else ""
        self.maker = maker or PortMaker(cloud, network_id=network_id,
                                        subnet_id="")
        self._subnets: dict[str, osa.Subnet] = {}
        self._lists = 0         # lists made by this process

    def cluster_tag(self) -> str:
        """``kuryr-supervisor:<cluster_id>``; by default the kube-system
        namespace's UID, read once (an API outage is retried)."""
        if not self.tag:
            uid = k8s_nodes.uid(self.client.namespaces.get("kube-system"))
            if not uid:
                raise k8s.K8sTemporary("kube-system has no UID yet")
            self.tag = osa.cluster_tag(uid)
            LOG.info("cluster id: %s (kube-system's UID)", uid)
        return self.tag

    def listed(self) -> list[osa.Port]:
        """Every port of the controller's (one filtered, paged list), the
        ports whose tag call was lost found again (see the module). The
        first list of a process learns first what Neutron allows
        (:meth:`~kuryr_supervisor.controller.openstack.making.PortMaker.
        detect`: it reads the pod network, so a missing one is said)."""
        project = self.project_id or self.cloud.token().project_id
        if not project:
            raise osa.OpenStackUnavailable("no project id")
        tag, maker = self.cluster_tag(), self.maker
        if not self._lists:
            maker.detect(project)
        maker.retag()
        ports = self.cloud.owned_ports(network_id=self.network_id, tag=tag,
                                       project_id=project)
        if maker.modes.tags_at_create is False and (
                not self._lists or maker.untagged):
            ports += maker.recognise(
                self.cloud.untagged_ports(network_id=self.network_id,
                                          tag=tag, project_id=project),
                tag, lambda p: poolports.tags_of(tag)
                if p.device_id == poolports.POOL_DEVICE else [tag])
        self._lists += 1
        return ports

    def data(self, uid: str, port: osa.Port) -> podport.PortData:
        """What pod ``uid``'s PodPort says of ``port``; ValueError if the
        port or its subnet cannot give a pod an address."""
        if port.ip is None:
            raise ValueError(f"port {port.id} has no IPv4 address")
        subnet = self._subnet(port.subnet_id)
        if subnet.gateway is None:
            raise ValueError(f"subnet {subnet.id} has no gateway")
        return podport.PortData(
            port_id=port.id, pod_uid=uid, mac=port.mac.lower(),
            address=ipaddress.IPv4Interface(f"{port.ip}/{subnet.cidr.prefixlen}"),
            gateway=subnet.gateway)

    def _subnet(self, subnet_id: str) -> osa.Subnet:
        if subnet_id not in self._subnets:
            self._subnets[subnet_id] = self.cloud.subnet(subnet_id)
            self._beat()
        return self._subnets[subnet_id]

    def release(self, uid: str, namespace: str, name: str,
                ports: Iterable[str] = (), *, look_up: bool) -> None:
        """Delete pod ``uid``'s PodPort (only while it is that pod's: a
        pod of the same name may have one now; Kubernetes' garbage
        collector deletes a deleted pod's too: ownerReference), then its
        ports: ``ports`` (by id), and, with ``look_up`` (Neutron may hold
        ports unknown to the handler), those Neutron lists for the pod.
        A deleted pod's and a finished pod's (:mod:`.finished`) alike."""
        current = self.client.podports.get(name, namespace=namespace)
        if current is not None and podport.owner_uid(current) == uid:
            self.client.podports.delete(name, namespace=namespace, uid=str(
                (current.get("metadata") or {}).get("uid") or ""))
        ids = list(dict.fromkeys(p for p in ports if p))
        if look_up:
            ids += [p.id for p in self.cloud.ports_of(
                uid, network_id=self.network_id, tag=self.cluster_tag())
                if p.id not in ids]
        for port in ids:
            if self.cloud.delete_port(port):
                LOG.info("deleted port %s of pod %s/%s", port, namespace,
                         name)
