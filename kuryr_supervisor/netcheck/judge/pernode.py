"""A family of Neutron ports, one per node, made as for a pod: the
nodes' canaries (:mod:`.canaryports`) and the nodes' own ports into the
pod network (:mod:`.nodeports`) are two.

A family's port is on the pod network and subnet, in the project, bound
to its node (``binding:host_id``), tagged with the cluster tag and the
family's tag, under a ``device_owner`` of the family's own (so that the
port handler's lookups and sweeps, and the other family's, never see it).
Its ``device_id`` names the node (:func:`device_id`), so one list finds
every node's.

:meth:`PerNodePorts.reconcile` is one pass over that list: the oldest
port of each node served is kept, its other ports deleted, and the ports
of nodes not served (a node gone, its daemon uninstalled) deleted; a node
without a port gets one made. Deletes happen only when the list proves
itself ours (every port carries the cluster tag: Neutron honoured the
filter), as the pods' sweep.

Tags: where Neutron drops a create's tags (without ML2's
``tag_ports_during_bulk_creation``, its default), a new port is tagged
right after its create through the tags API, as the pods' ports
(:class:`~kuryr_supervisor.controller.openstack.tagging.Tags`); a failed
tag call is tried again at the next pass. A port whose tag call was lost
for good (the controller died between the two calls) is found at the
first pass by its name, which carries the cluster tag, and tagged then;
without that, every restart at the wrong moment would leak a port.
"""
from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import logging
from collections.abc import Callable, Collection, Sequence

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack.tagging import Tags
from kuryr_supervisor.controller.openstack.wire import port_name
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes import nodes as k8s_nodes
from kuryr_supervisor.netcheck.codecs.canaryspec import CanaryPort

LOG = logging.getLogger(__name__)

#: Creates made in one pass at most (the rest wait for the next pass).
CREATES_PER_PASS = 20

#: The security groups of a new port, given (project, cluster tag); None:
#: none named (the project's default, as the pods' ports).
Groups = Callable[[str, str], Sequence[str] | None]


@dataclasses.dataclass(frozen=True)
class Family:
    """What sets a family's ports apart (see the module)."""

    what: str           # said in the log: "canary port"
    tag: str            # beside the cluster tag
    owner: str          # device_owner
    prefix: str         # of device_id, before the node's name
    kind: str           # of the name, before the node's name: "canary"


def device_id(family: Family, node: str) -> str:
    """The ``device_id`` of ``family``'s port for ``node`` (within
    Neutron's 255 characters: a long name is cut and hashed)."""
    name = node if len(family.prefix) + len(node) <= 255 else \
        node[:200] + "-" + hashlib.sha256(node.encode()).hexdigest()[:16]
    return family.prefix + name


class PerNodePorts:
    """See the module; ``beat`` is the handler's heartbeat, ``groups``
    the security groups a new port is made with."""

    def __init__(self, cloud: osa.OpenStack, client: k8s.K8sClient,
                 family: Family, *, network_id: str, subnet_id: str,
                 project_id: str = "", cluster_id: str = "",
                 beat: Callable[[], None] = lambda: None,
                 groups: Groups = lambda project, tag: None) -> None:
        self.cloud, self.client, self._beat = cloud, client, beat
        self.family, self._groups = family, groups
        self.network_id, self.subnet_id = network_id, subnet_id
        self.project_id = project_id
        self.tag = osa.cluster_tag(cluster_id) if cluster_id else ""
        #: Tags set after a create (where Neutron drops a create's).
        self.tags = Tags(cloud)
        self._passes = 0
        #: node -> its port, as the last pass left it
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

    def project(self) -> str:
        return self.project_id or self.cloud.token().project_id

    def _listed(self, project: str, tag: str) -> list[osa.Port]:
        fam = self.family
        self.tags.retag()
        listed = self.cloud.owned_ports(network_id=self.network_id, tag=tag,
                                        project_id=project,
                                        device_owner=fam.owner)
        if not self._passes or self.tags.pending:
            listed += self.tags.recognise(self.cloud.untagged_ports(
                network_id=self.network_id, tag=tag, project_id=project,
                device_owner=fam.owner), tag,
                lambda port: (tag, fam.tag), fam.owner)
        self._passes += 1
        self._beat()
        return listed

    def reconcile(self, nodes: Collection[str]) -> int:
        """One pass (see the module) for the nodes served; returns how
        many ports were made or deleted."""
        fam, project, tag = self.family, self.project(), self.cluster_tag()
        listed = self._listed(project, tag)
        proven = all(tag in p.tags for p in listed)
        owner = {device_id(fam, n): n for n in nodes}
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
                    LOG.info("deleted %s %s (%s)", fam.what, port.id,
                             "a duplicate" if port.device_id in owner else
                             "its node is not served")
                    changed += 1
                self._beat()
        missing = sorted(set(nodes) - set(ports))[:CREATES_PER_PASS]
        groups = self._groups(project, tag) if missing else None
        for node in missing:
            made = self.cloud.create_port(
                network_id=self.network_id, subnet_id=self.subnet_id,
                name=port_name(tag, f"{fam.kind}/{node}"),
                device_id=device_id(fam, node), tags=[tag, fam.tag],
                host=node, device_owner=fam.owner, security_groups=groups)
            ports[node], = self.tags.tagged([made], (tag, fam.tag),
                                            self.cloud.timeout)
            LOG.info("made %s %s for node %s", fam.what, ports[node].id, node)
            changed += 1
            self._beat()
        self.ports = ports
        return changed

    def assigned(self, node: str) -> CanaryPort | None:
        """What ``node``'s record says of its port; None while it has none
        (or the port cannot give an address)."""
        port = self.ports.get(node)
        if port is None or port.ip is None:
            return None
        subnet = self._subnets.get(port.subnet_id)
        if subnet is None:
            subnet = self._subnets[port.subnet_id] = self.cloud.subnet(
                port.subnet_id)
        return CanaryPort(port.id, port.mac.lower(), ipaddress.IPv4Interface(
            f"{port.ip}/{subnet.cidr.prefixlen}"), subnet.gateway)
