"""What Neutron should hold for the cluster's NetworkPolicies, and which
security groups each pod's port carries (pure).

Groups on a pod's port (:func:`port_groups`):

* a pod no policy selects keeps the port's default groups (``None``: the
  handler leaves it as the port handler made it: today's connectivity);
* a pod some policy selects carries the main group of every policy that
  selects it, the variant of each whose named ingress ports it resolves
  (:mod:`.rules`), and the handler's own groups:

  - ``node:<digest of the node's name>``: to and from the addresses of
    the pod's own node, from which Kubernetes says a pod can never be cut
    off (the kubelet's probes); other nodes' addresses are no different
    from any other;
  - ``base``: from the network-health canaries (address group
    ``canaries``), so a policy never makes a node look faulty
    (:class:`Infrastructure` is the hook: the handler says which
    addresses are whose);
  - ``open-ingress`` when no selecting policy is of type ``Ingress``,
    ``open-egress`` when none is of type ``Egress``: a port that leaves its
    default groups must still admit everything in the direction it is not
    isolated in, as Kubernetes defines it (a policy's own group holds only
    the rules of its types, never an "allow all" for the other one);
  - ``selected``: a marker, no rule of its own, that the default groups
    admit (:attr:`Desired.default_rules`). Neutron's ``default`` group
    admits ingress from its own members only, and a selected pod leaves
    it: without the marker, it could not reach a pod no policy selects,
    which Kubernetes says admits everything. The rule names the marker,
    not the pod subnet: the default groups admit nothing they did not
    admit before but the pods that left them.

Everything else is per policy (:mod:`.rules`) and per peer set
(:mod:`.peers`). Neutron adds two "allow all egress" rules to every group
it creates: they are not in :class:`SecurityGroup` and the handler must
remove them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from kuryr_supervisor.controller.policy.cidrs import ethertype, host
from kuryr_supervisor.controller.policy.naming import Naming
from kuryr_supervisor.controller.policy.peers import PeerSet, members
from kuryr_supervisor.controller.policy.rules import (
    SgRule,
    named_ports,
    policy_rules,
    variant,
)
from kuryr_supervisor.controller.policy.spec import Namespace, Pod, Policy


@dataclasses.dataclass(frozen=True)
class SecurityGroup:
    name: str
    description: str
    rules: frozenset[SgRule]


@dataclasses.dataclass(frozen=True)
class AddressGroup:
    name: str
    description: str
    addresses: frozenset[str]
    #: The pods it holds (None: not pods: the canaries').
    peers: PeerSet | None = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class Infrastructure:
    """The addresses a selected pod exchanges traffic with whatever its
    policies say: its own node's (node name -> the addresses it reaches
    pods from: the kubelet, the node's own stack) and the canaries'."""

    nodes: Mapping[str, tuple[str, ...]] = dataclasses.field(
        default_factory=dict)
    canaries: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Desired:
    """Security groups and address groups by name; pod (namespace, name)
    -> the groups of its port (absent: its default groups); the rules each
    default group must hold beside its own (never removed from it: a
    deleted marker takes them with it)."""

    groups: Mapping[str, SecurityGroup]
    address_groups: Mapping[str, AddressGroup]
    ports: Mapping[tuple[str, str], tuple[str, ...]]
    default_rules: frozenset[SgRule] = frozenset()


def _selects(policy: Policy, pod: Pod) -> bool:
    return policy.namespace == pod.namespace and \
        policy.selector.matches(pod.labels)


def port_groups(pod: Pod, policies: Iterable[Policy], naming: Naming
                ) -> tuple[str, ...] | None:
    """The groups of ``pod``'s port (None: its default groups). Needs only
    the pod and the policies: what a port gets when it is made."""
    if pod.host_network:
        return None
    mine = [p for p in policies if _selects(p, pod)]
    ingress = any("Ingress" in p.types for p in mine)
    egress = any("Egress" in p.types for p in mine)
    if not ingress and not egress:
        return None
    names = {naming.policy(p.uid) for p in mine}
    names |= {naming.policy(p.uid, variant(named)) for p in mine
              if "Ingress" in p.types and (named := named_ports(p, pod))}
    names.add(naming.own("base"))
    names.add(naming.own("selected"))
    if pod.node:
        names.add(naming.node(pod.node))
    if not ingress:
        names.add(naming.own("open-ingress"))
    if not egress:
        names.add(naming.own("open-egress"))
    return tuple(sorted(names))


def own_groups(naming: Naming, families: tuple[str, ...],
               nodes: Mapping[str, tuple[str, ...]]) -> list[SecurityGroup]:
    """The handler's own groups (see the module)."""
    out = [SecurityGroup(naming.node(node), f"node {node}"[:255], frozenset(
        SgRule(d, ethertype(a), remote_ip_prefix=host(a))
        for a in addresses for d in ("ingress", "egress")))
        for node, addresses in sorted(nodes.items())]
    return out + [
        SecurityGroup(naming.own("base"), "the canaries", frozenset(
            SgRule("ingress", f, remote_address_group=naming.own("canaries"))
            for f in families)),
        SecurityGroup(naming.own("open-ingress"), "not isolated for ingress",
                      frozenset(SgRule("ingress", f) for f in families)),
        SecurityGroup(naming.own("open-egress"), "not isolated for egress",
                      frozenset(SgRule("egress", f) for f in families)),
        SecurityGroup(naming.own("selected"),
                      "selected by a policy: admitted by the default group",
                      frozenset())]


def default_rules(naming: Naming, families: tuple[str, ...]
                  ) -> frozenset[SgRule]:
    """The rules the default groups hold for the pods a policy selects:
    ingress, any protocol, from the ``selected`` marker (see the
    module)."""
    return frozenset(SgRule("ingress", f, remote_group=naming.own("selected"))
                     for f in families)


def desired(policies: Iterable[Policy], pods: Iterable[Pod],
            namespaces: Iterable[Namespace], naming: Naming, *,
            infrastructure: Infrastructure = Infrastructure(),
            families: tuple[str, ...] = ("IPv4",)) -> Desired:
    """Everything the cluster's ``policies`` ask of Neutron (see the
    module)."""
    policies, pods = list(policies), [p for p in pods if not p.host_network]
    by_name = {ns.name: ns for ns in namespaces}
    groups = {g.name: g for g in own_groups(naming, families,
                                            infrastructure.nodes)}
    canaries = naming.own("canaries")
    address_groups = {canaries: AddressGroup(canaries, "the canaries",
                                             frozenset(
        host(a) for a in infrastructure.canaries
        if ethertype(a) in families))}
    for policy in sorted(policies, key=lambda p: p.uid):
        made = policy_rules(policy, pods, by_name, naming, families=families)
        what = f"NetworkPolicy {policy.namespace}/{policy.name}"[:255]
        name = naming.policy(policy.uid)
        groups[name] = SecurityGroup(name, what, made.main)
        for key, rules in made.variants.items():
            name = naming.policy(policy.uid, key)
            groups[name] = SecurityGroup(name, f"{what}: named ports"[:255],
                                         rules)
        for name, peers in made.peer_sets.items():
            address_groups.setdefault(name, AddressGroup(
                name, peers.describe(),
                members(peers, pods, by_name, families), peers))
    ports = {pod.key: found for pod in pods
             if (found := port_groups(pod, policies, naming)) is not None}
    return Desired(groups, address_groups, ports,
                   default_rules(naming, families))


def address_groups_of(pod: Pod, address_groups: Iterable[AddressGroup],
                      namespaces: Mapping[str, Namespace]) -> list[str]:
    """The address groups ``pod``'s addresses belong in: what a pod that
    comes (or is relabelled) changes, one member update per group and
    never a rule; and what must hold its address before its port is
    handed out."""
    return sorted(ag.name for ag in address_groups if ag.peers is not None
                  and not pod.host_network
                  and ag.peers.matches(pod, namespaces))
