"""The nodes' canary ports in Neutron: one per node, made as for a pod.

A canary port is on the pod network and subnet, in the project, with the
pods' security groups (none named: the project's default, as the pods'
ports), bound to its node (``binding:host_id``), tagged with the cluster
tag and :data:`CANARY_TAG`, under a ``device_owner`` of its own
(:data:`~kuryr_supervisor.controller.openstack.adapter.CANARY_OWNER`) so
that the port handler's lookups and sweeps never see it. Its
``device_id`` names the node (:func:`device_id`), so one list finds every
node's.

:meth:`CanaryPorts.reconcile` is one pass over that list: the oldest port
of each node that has a record is kept, its other ports deleted, and the
ports of nodes without a record (a node gone, its daemon uninstalled)
deleted; a node without a port gets one made. Deletes happen only when
the list proves itself ours (every port carries the cluster tag: Neutron
honoured the filter), as the pods' sweep.

Tags: where Neutron drops a create's tags (without ML2's
``tag_ports_during_bulk_creation``, its default), a new canary is tagged
right after its create through the tags API, as the pods' ports
(:class:`~kuryr_supervisor.controller.openstack.tagging.Tags`); a failed
tag call is tried again at the next pass. A canary whose tag call was
lost for good (the controller died between the two calls) is found at
the first pass by its name, which carries the cluster tag, and tagged
then; without that, every restart at the wrong moment would leak a port.
"""
from __future__ import annotations

import hashlib
import ipaddress
import logging
from collections.abc import Callable, Collection

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack.tagging import Tags
from kuryr_supervisor.controller.openstack.wire import port_name
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes import nodes as k8s_nodes
from kuryr_supervisor.netcheck.codecs.canaryspec import CanaryPort

LOG = logging.getLogger(__name__)

#: Tag of every canary port, beside the cluster tag.
CANARY_TAG = "kuryr-supervisor-canary"
_PREFIX = "kuryr-canary:"
#: Creates made in one pass at most (the rest wait for the next pass).
CREATES_PER_PASS = 20


def device_id(node: str) -> str:
    """The canary port's ``device_id`` for ``node`` (within Neutron's 255
    characters: a long name is cut and hashed)."""
    name = node if len(_PREFIX) + len(node) <= 255 else \
        node[:200] + "-" + hashlib.sha256(node.encode()).hexdigest()[:16]
    return _PREFIX + name


class CanaryPorts:
    """See the module; ``beat`` is the handler's heartbeat."""

    def __init__(self, cloud: osa.OpenStack, client: k8s.K8sClient, *,
                 network_id: str, subnet_id: str, project_id: str = "",
                 cluster_id: str = "",
                 beat: Callable[[], None] = lambda: None) -> None:
        self.cloud, self.client, self._beat = cloud, client, beat
        self.network_id, self.subnet_id = network_id, subnet_id
        self.project_id = project_id
        self.tag = osa.cluster_tag(cluster_id) if cluster_id else ""
        #: Tags set after a create (where Neutron drops a create's).
        self.tags = Tags(cloud)
        self._passes = 0
        #: node -> its canary port, as the last pass left it
        self.ports: dict[str, osa.Port] = {}
        self._subnets: dict[str, osa.Subnet] = {}

    def cluster_tag(self) -> str:
        """``kuryr-supervisor:<cluster_id>``, by default the kube-system
        namespace's UID, as the pods' ports carry it."""
        if not self.tag:
            uid = k8s_nodes.uid(self.client.namespaces.get("kube-system"))
            if not uid:
                raise k8s.K8sTemporary("kube-system has no UID yet")
            self.tag = osa.cluster_tag(uid)
        return self.tag

    def reconcile(self, nodes: Collection[str]) -> int:
        """One pass (see the module) for the nodes with a record;
        returns how many ports were made or deleted."""
        project = self.project_id or self.cloud.token().project_id
        tag = self.cluster_tag()
        self.tags.retag()
        listed = self.cloud.owned_ports(network_id=self.network_id, tag=tag,
                                        project_id=project,
                                        device_owner=osa.CANARY_OWNER)
        if not self._passes or self.tags.pending:
            listed += self.tags.recognise(self.cloud.untagged_ports(
                network_id=self.network_id, tag=tag, project_id=project,
                device_owner=osa.CANARY_OWNER), tag,
                lambda port: (tag, CANARY_TAG), osa.CANARY_OWNER)
        self._passes += 1
        self._beat()
        proven = all(tag in p.tags for p in listed)
        owner = {device_id(n): n for n in nodes}
        ports: dict[str, osa.Port] = {}
        doomed = []
        for port in sorted(listed, key=lambda p: (p.created_at, p.id)):
            node = owner.get(port.device_id, "")
            if node and node not in ports:
                ports[node] = port
            elif tag in port.tags:
                doomed.append(port)
        changed = 0
        if proven:
            for port in doomed:
                if self.cloud.delete_port(port.id):
                    LOG.info("deleted canary port %s (%s)", port.id,
                             "a duplicate" if port.device_id in owner else
                             "its node has no record")
                    changed += 1
                self._beat()
        for node in sorted(set(nodes) - set(ports))[:CREATES_PER_PASS]:
            made = self.cloud.create_port(
                network_id=self.network_id, subnet_id=self.subnet_id,
                name=port_name(tag, f"canary/{node}"),
                device_id=device_id(node), tags=[tag, CANARY_TAG],
                host=node, device_owner=osa.CANARY_OWNER)
            ports[node], = self.tags.tagged([made], (tag, CANARY_TAG),
                                            self.cloud.timeout)
            LOG.info("made canary port %s for node %s", ports[node].id, node)
            changed += 1
            self._beat()
        self.ports = ports
        return changed

    def canary(self, node: str) -> CanaryPort | None:
        """What ``node``'s record says of its canary port; None while it
        has none (or the port cannot give an address)."""
        port = self.ports.get(node)
        if port is None or port.ip is None:
            return None
        subnet = self._subnets.get(port.subnet_id)
        if subnet is None:
            subnet = self._subnets[port.subnet_id] = self.cloud.subnet(
                port.subnet_id)
        return CanaryPort(port.id, port.mac.lower(), ipaddress.IPv4Interface(
            f"{port.ip}/{subnet.cidr.prefixlen}"), subnet.gateway)
