"""NetworkPolicy, Pod and Namespace objects as the policy model reads them.

A NetworkPolicy is written by a tenant: every field is read for its type
and judged here, and nothing raises on a hostile object. What the API's
validation refuses is kept as *invalid* (:attr:`Peer.valid`,
:attr:`PortSpec.valid`, an invalid :class:`~.selectors.Selector`) rather
than dropped: a rule whose only port is invalid must match nothing, and
dropping the port would leave a rule with no ports, which matches every
port. Absent and empty lists keep their meaning (``from: []`` and no
``from``: every peer; ``ports: []``: every port).
"""
from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from typing import Any

from kuryr_supervisor.controller.policy.selectors import Selector, selector

PROTOCOLS = ("TCP", "UDP", "SCTP")
TYPES = ("Ingress", "Egress")
#: Items kept of one list at most (the API has no such objects).
MAX_ITEMS = 1000


@dataclasses.dataclass(frozen=True)
class Block:
    """An ``ipBlock``: ``cidr`` minus ``excepts`` (normalized networks)."""

    cidr: str
    excepts: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Peer:
    """One ``from``/``to`` entry: selectors (None: the field is absent) or
    a block."""

    pods: Selector | None = None
    namespaces: Selector | None = None
    block: Block | None = None
    valid: bool = True


@dataclasses.dataclass(frozen=True)
class PortSpec:
    """One ``ports`` entry: ``port`` None (every port), a number (up to
    ``end``) or a name."""

    protocol: str = "TCP"
    port: int | str | None = None
    end: int | None = None
    valid: bool = True


@dataclasses.dataclass(frozen=True)
class Rule:
    peers: tuple[Peer, ...] = ()        # empty: every peer
    ports: tuple[PortSpec, ...] = ()    # empty: every port


@dataclasses.dataclass(frozen=True)
class Policy:
    uid: str
    namespace: str
    name: str
    selector: Selector
    types: frozenset[str]
    ingress: tuple[Rule, ...] = ()
    egress: tuple[Rule, ...] = ()


@dataclasses.dataclass(frozen=True, eq=False)
class Pod:
    namespace: str
    name: str
    labels: Mapping[str, str]
    ips: tuple[str, ...]
    #: (name, protocol) -> number of its named container ports
    ports: Mapping[tuple[str, str], int]
    node: str = ""
    #: A host-network pod has no port of its own: no policy applies to it.
    host_network: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name


@dataclasses.dataclass(frozen=True, eq=False)
class Namespace:
    name: str
    labels: Mapping[str, str]


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value[:MAX_ITEMS]) if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _number(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and \
        1 <= value <= 65535
    return value if ok else None


def _labels(meta: Mapping[str, Any]) -> dict[str, str]:
    return {k: v for k, v in _map(meta.get("labels")).items()
            if isinstance(k, str) and isinstance(v, str)}


def _block(value: Any) -> Block | None:
    try:
        cidr = ipaddress.ip_network(_str(value.get("cidr")), strict=False)
        excepts = [ipaddress.ip_network(_str(e), strict=False)
                   for e in _list(value.get("except"))]
    except ValueError:
        return None
    return Block(str(cidr), tuple(sorted({str(e) for e in excepts})))


def peer(value: Any) -> Peer:
    """One peer; any combination the API refuses is invalid."""
    item = _map(value)
    pods, nss, block = (item.get(k) for k in
                        ("podSelector", "namespaceSelector", "ipBlock"))
    if block is not None:
        decoded = _block(_map(block))
        return Peer(block=decoded) if decoded and pods is None and \
            nss is None else Peer(valid=False)
    if pods is None and nss is None:
        return Peer(valid=False)
    return Peer(None if pods is None else selector(pods),
                None if nss is None else selector(nss))


def port_spec(value: Any) -> PortSpec:
    item = _map(value)
    protocol = item.get("protocol") or "TCP"
    port, end = item.get("port"), item.get("endPort")
    if protocol not in PROTOCOLS:
        return PortSpec(valid=False)
    if port is None or isinstance(port, str):
        ok = end is None and (port is None or 0 < len(port) <= 15)
        return PortSpec(protocol, port) if ok else PortSpec(valid=False)
    number, last = _number(port), _number(end) if end is not None else None
    if number is None or (end is not None and (last is None or last < number)):
        return PortSpec(valid=False)
    return PortSpec(protocol, number, last)


def _rules(value: Any, key: str) -> tuple[Rule, ...]:
    return tuple(Rule(tuple(peer(p) for p in _list(_map(r).get(key))),
                      tuple(port_spec(p) for p in _list(_map(r).get("ports"))))
                 for r in _list(value))


def policy(obj: Mapping[str, Any]) -> Policy:
    """A NetworkPolicy; ``policyTypes`` defaulted as the API does."""
    meta, spec = _map(obj.get("metadata")), _map(obj.get("spec"))
    types = frozenset(t for t in _list(spec.get("policyTypes")) if t in TYPES)
    if not _list(spec.get("policyTypes")):
        types = frozenset(("Ingress", "Egress") if _list(spec.get("egress"))
                          else ("Ingress",))
    return Policy(_str(meta.get("uid")), _str(meta.get("namespace")),
                  _str(meta.get("name")), selector(spec.get("podSelector")),
                  types, _rules(spec.get("ingress"), "from"),
                  _rules(spec.get("egress"), "to"))


def pod(obj: Mapping[str, Any]) -> Pod:
    """A Pod: its addresses, labels, named container ports and node."""
    meta, spec = _map(obj.get("metadata")), _map(obj.get("spec"))
    status = _map(obj.get("status"))
    ips = [_str(_map(i).get("ip")) for i in _list(status.get("podIPs"))]
    ips = ips or [_str(status.get("podIP"))]
    named: dict[tuple[str, str], int] = {}
    for container in _list(spec.get("containers")):
        for cp in map(_map, _list(_map(container).get("ports"))):
            name, number = _str(cp.get("name")), _number(cp.get("containerPort"))
            if name and number is not None:
                named.setdefault((name, _str(cp.get("protocol")) or "TCP"),
                                 number)
    return Pod(_str(meta.get("namespace")), _str(meta.get("name")),
               _labels(meta), tuple(ip for ip in ips if ip), named,
               _str(spec.get("nodeName")), spec.get("hostNetwork") is True)


def namespace(obj: Mapping[str, Any]) -> Namespace:
    meta = _map(obj.get("metadata"))
    return Namespace(_str(meta.get("name")), _labels(meta))


#: The Node addresses a pod's own node reaches it from (the kubelet's
#: probes): its status' internal and external addresses.
NODE_ADDRESS_TYPES = ("InternalIP", "ExternalIP")


def node(obj: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """A Node: its name and its addresses (a kubelet writes them: what is
    not an IP address is left out, never raised)."""
    meta, status = _map(obj.get("metadata")), _map(obj.get("status"))
    found: list[str] = []
    for item in map(_map, _list(status.get("addresses"))):
        if item.get("type") not in NODE_ADDRESS_TYPES:
            continue
        try:
            found.append(str(ipaddress.ip_address(_str(item.get("address")))))
        except ValueError:
            continue
    return _str(meta.get("name")), tuple(dict.fromkeys(found))
