"""One NetworkPolicy's security-group rules (a pure function).

A policy's group holds the rules of its types only (``ingress`` rules for
``Ingress``, ``egress`` for ``Egress``) and goes on the ports of the pods
it selects. Each rule of the policy becomes one Neutron rule per (peer,
port entry, ethertype): a peer with a selector names its address group
(:mod:`.peers`), a block its covering CIDRs (:mod:`.cidrs`), no peer any
remote; a port entry is a protocol and a range (``endPort``), or the
protocol alone; no port entry, any protocol. Nothing here counts pods:
the rules stay the same while pods come and go.

Named ports are the exception Neutron forces, since a rule holds numbers:

* egress (the remote pod's port): one rule per number the peer's pods
  give the name, naming the address group of those pods (:mod:`.peers`);
* ingress (the local pod's port): a rule cannot tell the ports that carry
  its group apart, so the named rules go into a *variant* group per
  mapping of names to numbers the selected pods have (usually one: a
  Deployment's pods share their spec), carried by the pods with that
  mapping beside the policy's main group.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping

from kuryr_supervisor.controller.policy.cidrs import ethertype, remaining
from kuryr_supervisor.controller.policy.naming import Naming, digest
from kuryr_supervisor.controller.policy.peers import EVERY_POD, PeerSet, peer_set
from kuryr_supervisor.controller.policy.spec import Namespace, Peer, Pod, Policy, PortSpec

Named = tuple[tuple[str, str, int], ...]


@dataclasses.dataclass(frozen=True)
class SgRule:
    """A Neutron security-group rule; ``remote_address_group`` is the
    address group's name (its id once made), ``remote_group`` a security
    group's (its members' addresses: the rule the default groups hold,
    :mod:`.desired`); no remote: any."""

    direction: str
    ethertype: str
    protocol: str | None = None
    port_range_min: int | None = None
    port_range_max: int | None = None
    remote_ip_prefix: str | None = None
    remote_address_group: str | None = None
    remote_group: str | None = None

    def sort_key(self) -> tuple[str, ...]:
        return tuple("" if v is None else str(v)
                     for v in dataclasses.astuple(self))


@dataclasses.dataclass(frozen=True)
class PolicyRules:
    """A policy's main group's rules, its variants' (digest -> rules) and
    the address groups they name (name -> key)."""

    main: frozenset[SgRule]
    variants: Mapping[str, frozenset[SgRule]]
    peer_sets: Mapping[str, PeerSet]


class _Rules:
    """Rules and the address groups they name, as they are made."""

    def __init__(self, policy: Policy, naming: Naming,
                 families: tuple[str, ...]) -> None:
        self.policy, self.naming, self.families = policy, naming, families
        self.peer_sets: dict[str, PeerSet] = {}

    def _group(self, peers: PeerSet) -> str:
        name = self.naming.address_group(peers.key())
        self.peer_sets[name] = peers
        return name

    def remotes(self, peer: Peer | None, named: tuple[str, str, int] | None
                ) -> list[tuple[str, str | None, str | None]]:
        """(ethertype, prefix, address group) of each rule ``peer`` needs
        (None: any peer)."""
        if peer is not None and not peer.valid:
            return []
        if peer is not None and peer.block is not None and named is None:
            return [(ethertype(c), c, None)
                    for c in remaining(peer.block.cidr, peer.block.excepts)]
        if peer is None and named is None:
            return [(f, None, None) for f in self.families]
        base = EVERY_POD if peer is None else \
            peer_set(peer, self.policy.namespace)
        group = self._group(dataclasses.replace(base, named=named)) \
            if named is not None else self._group(base)
        return [(f, None, group) for f in self.families]

    def make(self, direction: str, peers: Iterable[Peer | None],
             protocol: str | None, first: int | None, last: int | None,
             named: tuple[str, str, int] | None = None) -> set[SgRule]:
        return {SgRule(direction, eth, protocol, first, last, prefix, group)
                for peer in peers for eth, prefix, group in
                self.remotes(peer, named)}


def _plain(spec: PortSpec | None) -> tuple[str | None, int | None, int | None]:
    if spec is None:
        return None, None, None
    number = spec.port if isinstance(spec.port, int) else None
    return spec.protocol.lower(), number, spec.end or number


def named_ports(policy: Policy, pod: Pod) -> Named:
    """The numbers ``pod`` gives the names ``policy``'s ingress rules use
    (the pod's variant, empty: none)."""
    used = {(s.port, s.protocol) for r in policy.ingress for s in r.ports
            if s.valid and isinstance(s.port, str)}
    return tuple(sorted((name, proto, pod.ports[(name, proto)])
                        for name, proto in used if (name, proto) in pod.ports))


def variant(named: Named) -> str:
    """A variant's digest ("": no variant)."""
    return digest(json.dumps(named)) if named else ""


def policy_rules(policy: Policy, pods: Iterable[Pod],
                 namespaces: Mapping[str, Namespace], naming: Naming, *,
                 families: tuple[str, ...] = ("IPv4",)) -> PolicyRules:
    """``policy``'s rules (see the module); ``pods`` and ``namespaces``
    give the numbers of named ports."""
    pods = [p for p in pods if not p.host_network]
    out = _Rules(policy, naming, families)
    main: set[SgRule] = set()
    variants: dict[str, frozenset[SgRule]] = {}
    if "Egress" in policy.types:
        main |= _egress(policy, pods, namespaces, out)
    if "Ingress" in policy.types:
        for rule in policy.ingress:
            for spec in rule.ports or (None,):
                if spec is None or (spec.valid and
                                    not isinstance(spec.port, str)):
                    main |= out.make("ingress", rule.peers or (None,),
                                     *_plain(spec))
        for pod in pods:
            named = named_ports(policy, pod)
            if named and pod.namespace == policy.namespace and \
                    policy.selector.matches(pod.labels) and \
                    variant(named) not in variants:
                variants[variant(named)] = frozenset(_variant_rules(
                    policy, {(n, p): v for n, p, v in named}, out))
    return PolicyRules(frozenset(main), variants, dict(out.peer_sets))


def _egress(policy: Policy, pods: list[Pod],
            namespaces: Mapping[str, Namespace], out: _Rules) -> set[SgRule]:
    """The egress rules; a named port: a rule per number its peer's pods
    give it."""
    rules: set[SgRule] = set()
    for rule in policy.egress:
        peers = rule.peers or (None,)
        for spec in rule.ports or (None,):
            if spec is not None and not spec.valid:
                continue
            if spec is None or not isinstance(spec.port, str):
                rules |= out.make("egress", peers, *_plain(spec))
                continue
            key = (spec.port, spec.protocol)
            for peer in peers:
                if peer is not None and not peer.valid:
                    continue
                base = EVERY_POD if peer is None else \
                    peer_set(peer, policy.namespace)
                numbers = {p.ports[key] for p in pods if key in p.ports
                           and base.matches(p, namespaces)}
                for number in sorted(numbers):
                    rules |= out.make("egress", (peer,),
                                      spec.protocol.lower(), number, number,
                                      (spec.port, spec.protocol, number))
    return rules


def _variant_rules(policy: Policy, numbers: Mapping[tuple[str, str], int],
                   out: _Rules) -> set[SgRule]:
    rules: set[SgRule] = set()
    for rule in policy.ingress:
        for spec in rule.ports:
            key = (spec.port, spec.protocol)
            if spec.valid and isinstance(spec.port, str) and key in numbers:
                number = numbers[key]           # type: ignore[index]
                rules |= out.make("ingress", rule.peers or (None,),
                                  spec.protocol.lower(), number, number)
    return rules
