"""What Neutron holds for the network_policy handler: its security groups
with their rules, its address groups, the pods' ports with their groups,
and the addresses the model needs from Neutron (the canaries', the nodes'
own ports'), read in one full look (:func:`look`) and kept up to date by
the handler's own writes between two looks (:class:`Inventory`).

Ownership is by tags and names (:mod:`.naming`), never a finalizer: the
groups are listed by the cluster's tag and :data:`~.naming.POLICY_TAG`
(and, to find one whose tag call was lost, by the tag as description:
such a group is tagged then, adopted); address groups, which Neutron
gives no tags, by the tag as their description and a name of the
cluster's. A listing *proves itself ours* when everything it returned
carries what it was filtered on (a Neutron that ignores a filter returns
more): only then may what it holds that no policy needs be deleted
(:attr:`Inventory.proven`); otherwise nothing is deleted, and said once.
Two groups of one name (a create whose answer was lost, made again): the
first is kept, the others deleted.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack.sgwire import AddressGroup, PolicyGroup
from kuryr_supervisor.controller.policy.book import Snapshot
from kuryr_supervisor.controller.policy.naming import POLICY_TAG, Naming
from kuryr_supervisor.controller.policy.spec import Pod

LOG = logging.getLogger(__name__)


@dataclasses.dataclass
class PortView:
    """A pod's port as the handler knows it."""

    id: str
    groups: tuple[str, ...]
    #: Its addresses: a new pod's until its status says them (the port
    #: handler puts them in the pod's peer address groups before that).
    ips: tuple[str, ...] = ()

    def carries(self, groups: tuple[str, ...]) -> None:
        """The port's groups as Neutron just answered a change of them."""
        self.groups = groups


@dataclasses.dataclass
class Inventory:
    """See the module; changed in place by the handler's writes."""

    #: name -> group (ours)
    groups: dict[str, PolicyGroup]
    #: name -> address group (ours)
    address_groups: dict[str, AddressGroup]
    #: ours by name, but a second one: deleted
    duplicates: list[PolicyGroup | AddressGroup]
    #: the listings held ours alone (see the module)
    proven: bool
    #: pod UID -> its ports (most pods: one)
    ports: dict[str, list[PortView]]
    #: the groups a port no policy selects carries
    defaults: tuple[str, ...]
    canaries: tuple[str, ...] = ()
    #: node name -> its node port's addresses on the pod network
    node_ports: Mapping[str, tuple[str, ...]] = dataclasses.field(
        default_factory=dict)
    #: (a default group's id, one of ours' id) -> the ethertypes in which
    #: the first admits the second's members: asked once after each look
    admitted: dict[tuple[str, str], set[str]] = dataclasses.field(
        default_factory=dict)
    #: the groups beside ``defaults`` that admit what the default groups
    #: admit: the node ports' (``<cluster tag>:nodes``, the network_canary
    #: handler's, when it made one), whose members are the nodes'
    #: addresses on the pod network
    beside: tuple[str, ...] = ()

    def admitting(self) -> tuple[str, ...]:
        """The groups the ``selected`` marker's members must be admitted
        by, as the pods no policy selects are (:mod:`.desired`)."""
        return (*self.defaults, *self.beside)

    def group_ids(self) -> set[str]:
        return {g.id for g in self.groups.values()}


def _ports(found: Sequence[osa.Port]) -> dict[str, list[PortView]]:
    out: dict[str, list[PortView]] = {}
    for port in found:
        out.setdefault(port.device_id, []).append(
            PortView(port.id, tuple(port.security_groups),
                     (str(port.ip),) if port.ip is not None else ()))
    return out


def addressed(snap: Snapshot, inv: Inventory) -> list[Pod]:
    """``snap``'s pods, one whose status says no address yet with its
    port's: a new pod's address is in its peer address groups from
    before its PodPort (the port handler puts it there), and a pass
    between then and the pod's status must find it right, not take it
    out."""
    out = []
    for pod in snap.pods:
        views = inv.ports.get(snap.uids.get(pod.key, ""), ())
        if not any(pod.ips) and views and views[0].ips:
            pod = dataclasses.replace(pod, ips=views[0].ips)
        out.append(pod)
    return out


def port_views(api: Any, uids: Sequence[str],
               network_id: str) -> dict[str, list[PortView]]:
    """The ports of the pods ``uids`` (their device_id), in a few lists."""
    if not uids:
        return {}
    return _ports(api.ports_of_devices(list(uids), network_id=network_id))


def _defaults(api: Any, configured: Sequence[str], project: str
              ) -> tuple[str, ...]:
    if configured:
        return tuple(configured)
    found = api.security_groups(name="default", project_id=project)
    if not found:
        raise osa.OpenStackUnavailable(
            f"Neutron shows no default security group in project {project}")
    return (found[0].id,)


def _beside(api: Any, naming: Naming, project: str) -> tuple[str, ...]:
    """The node ports' group (see :class:`Inventory`), when there is one:
    the oldest of its name, as the handler that makes it keeps it (the
    name is the cluster's: its tag call may have been lost)."""
    return tuple(g.id for g in api.security_groups(
        name=naming.own("nodes"), project_id=project))[:1]


def look(api: Any, naming: Naming, *, network_id: str,
         defaults: Sequence[str] = ()) -> Inventory:
    """Everything (see the module): a list per kind, a few pages each."""
    tag = naming.cluster_tag
    proven = True
    groups: dict[str, PolicyGroup] = {}
    duplicates: list[PolicyGroup | AddressGroup] = []
    listed = api.policy_groups(tag, POLICY_TAG)
    for group in api.untagged_policy_groups(tag):
        if group.description == tag and group.name.startswith(f"{tag}:"):
            LOG.info("security group %s (%s) lacks its tags (its tag call "
                     "was lost): tagged now", group.id, group.name)
            tags = api.set_security_group_tags(group.id, list(naming.tags))
            listed.append(dataclasses.replace(group, tags=tuple(sorted(tags))))
    for group in sorted(listed, key=lambda g: g.id):
        if not set(naming.tags) <= set(group.tags) or \
                not group.name.startswith(f"{tag}:"):
            proven = False
            continue
        if group.name in groups:
            duplicates.append(group)
        else:
            groups[group.name] = group
    address_groups: dict[str, AddressGroup] = {}
    for ag in sorted(api.address_groups(tag), key=lambda a: a.id):
        if ag.description != tag or not ag.name.startswith(f"{tag}:"):
            proven = False
            continue
        if ag.name in address_groups:
            duplicates.append(ag)
        else:
            address_groups[ag.name] = ag
    ports = _ports(api.owned_ports(network_id=network_id))
    canaries = tuple(str(p.ip) for p in api.owned_ports(
        network_id=network_id, device_owner=osa.CANARY_OWNER) if p.ip)
    node_ports: dict[str, tuple[str, ...]] = {}
    for port in api.owned_ports(network_id=network_id,
                                device_owner=osa.NODE_OWNER):
        if port.ip and port.host:
            node_ports[port.host] = (*node_ports.get(port.host, ()),
                                     str(port.ip))
    project = api.token().project_id        # the token's: one read
    return Inventory(groups, address_groups, duplicates if proven else [],
                     proven, ports, _defaults(api, defaults, project),
                     canaries, node_ports,
                     beside=_beside(api, naming, project))
