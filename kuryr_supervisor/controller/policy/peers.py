"""The sets of pods a policy's rules name: one Neutron address group each.

A peer with a selector (``podSelector``, ``namespaceSelector``, both)
names a set of pods whatever policy it is written in; its key
(:class:`PeerSet`) is what it means, not how it is spelled: the selectors'
canonical forms, plus the policy's namespace only where it matters (a
``podSelector`` alone). Two policies with the same peer share the group,
and a pod that comes, goes or is relabelled changes the members of the
groups it is in, never a rule.

A named port on the remote side (an egress rule's ``port: http``) is the
peer pod's own number, which may differ from pod to pod: such a peer is a
set per number (``named``), members the peer's pods whose port of that
name and protocol has that number, so one rule per number admits each pod
on its own port. A block with a named port is the same, over the pods
whose address is in the block.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import json
from collections.abc import Iterable, Mapping

from kuryr_supervisor.controller.policy.cidrs import host, remaining
from kuryr_supervisor.controller.policy.selectors import Selector
from kuryr_supervisor.controller.policy.spec import Block, Namespace, Peer, Pod


@dataclasses.dataclass(frozen=True)
class PeerSet:
    """Pods of ``namespace`` ("": of every namespace ``namespaces`` selects,
    None: of every namespace) that ``pods`` selects (None: all), in
    ``block`` when given, whose named port ``named`` (name, protocol,
    number) is that number when given."""

    namespace: str = ""
    namespaces: Selector | None = None
    pods: Selector | None = None
    block: Block | None = None
    named: tuple[str, str, int] | None = None

    def key(self) -> str:
        """The canonical key (an address group's name is its digest)."""
        return json.dumps([
            self.namespace,
            None if self.namespaces is None else self.namespaces.canonical(),
            None if self.pods is None else self.pods.canonical(),
            None if self.block is None else [self.block.cidr,
                                             list(self.block.excepts)],
            None if self.named is None else list(self.named)],
            separators=(",", ":"))

    def describe(self) -> str:
        """What a person reads in the address group's description."""
        parts = [f"namespace {self.namespace}" if self.namespace else
                 "every namespace" if self.namespaces is None else
                 f"namespaces {self.namespaces.canonical()}",
                 "every pod" if self.pods is None else
                 f"pods {self.pods.canonical()}"]
        if self.block is not None:
            parts.append(f"in {self.block.cidr} "
                         f"except {list(self.block.excepts)}")
        if self.named is not None:
            parts.append("port {}/{} = {}".format(*self.named))
        return "; ".join(parts)[:255]

    def matches(self, pod: Pod, namespaces: Mapping[str, Namespace]) -> bool:
        if self.namespace and pod.namespace != self.namespace:
            return False
        if self.namespaces is not None:
            ns = namespaces.get(pod.namespace)
            if ns is None or not self.namespaces.matches(ns.labels):
                return False
        if self.pods is not None and not self.pods.matches(pod.labels):
            return False
        if self.named is not None and \
                pod.ports.get(self.named[:2]) != self.named[2]:
            return False
        return self.block is None or any(
            _inside(ip, self.block) for ip in pod.ips)


def _inside(ip: str, block: Block) -> bool:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    return any(addr in ipaddress.ip_network(n)
               for n in remaining(block.cidr, block.excepts))


def _everything(sel: Selector | None) -> Selector | None:
    return None if sel is None or sel.everything else sel


def peer_set(peer: Peer, namespace: str) -> PeerSet:
    """The set of pods a valid selector ``peer`` of a policy of
    ``namespace`` names (a block peer: the pods in its block)."""
    if peer.block is not None:
        return PeerSet(block=peer.block)
    if peer.namespaces is None:
        return PeerSet(namespace=namespace, pods=_everything(peer.pods))
    return PeerSet(namespaces=_everything(peer.namespaces),
                   pods=_everything(peer.pods))


EVERY_POD = PeerSet()


def members(peers: PeerSet, pods: Iterable[Pod],
            namespaces: Mapping[str, Namespace],
            families: Iterable[str] = ("IPv4",)) -> frozenset[str]:
    """The addresses (as /32 or /128) of the pods in ``peers``, of the
    cluster's ``families``."""
    versions = {4 if f == "IPv4" else 6 for f in families}
    out = set()
    for pod in pods:
        if pod.host_network or not peers.matches(pod, namespaces):
            continue
        for ip in pod.ips:
            try:
                if ipaddress.ip_address(ip).version in versions:
                    out.add(host(ip))
            except ValueError:
                continue
    return frozenset(out)
