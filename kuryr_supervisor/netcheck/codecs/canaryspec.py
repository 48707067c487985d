"""What the controller tells a node in its NodeNetwork record's spec: its
canary port, and whom to probe how often.

The controller's ``network_canary`` handler makes one Neutron port per
node that has a record, as for a pod, and writes it into that record's
spec with the node's share of the probing (a bounded sample of the other
nodes' canaries, the interval between two rounds); the node plugs the
port into a namespace of its own and probes from it::

    spec:
      nodeName: node-a
      canary:                       # the node's own canary port
        portId: "<neutron port id>"
        mac: "fa:16:3e:00:00:05"
        address: 10.0.0.5/24
        gateway: 10.0.0.1           # absent: the subnet has none
      probe:
        intervalSeconds: 5
        peers:                      # at most MAX_PEERS
          - {node: node-b, address: 10.0.0.7}

The node writes the status alone; the spec is the controller's (the
node's RBAC has no ``update`` on the object), shared with the network
judge's part (:mod:`.clusterspec`): each writer replaces its own keys and
keeps the rest (:func:`merged`). A node still checks what
it reads (:func:`assignment`): the types, the bounds, the address in its
subnet's shape, a unicast MAC.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from kuryr_supervisor.netcheck.codecs.record import MAX_ID, MAX_PEERS

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
#: The probe interval a spec may ask for, in seconds.
MIN_INTERVAL, MAX_INTERVAL = 1.0, 3600.0


@dataclasses.dataclass(frozen=True)
class CanaryPort:
    """The node's canary: a Neutron port of its own."""

    port_id: str
    mac: str
    address: ipaddress.IPv4Interface
    gateway: ipaddress.IPv4Address | None = None


@dataclasses.dataclass(frozen=True)
class Target:
    """A peer node's canary to probe."""

    node: str
    address: ipaddress.IPv4Address


@dataclasses.dataclass(frozen=True)
class Assignment:
    """What the spec says (nothing yet: no canary, no peers)."""

    canary: CanaryPort | None = None
    peers: tuple[Target, ...] = ()
    interval: float = 0.0


def spec(node: str, a: Assignment) -> dict[str, Any]:
    """The record's spec for ``a``."""
    out: dict[str, Any] = {"nodeName": node}
    if a.canary is not None:
        out["canary"] = port_doc(a.canary)
    if a.interval:
        out["probe"] = {"intervalSeconds": round(a.interval, 3), "peers": [
            {"node": t.node, "address": str(t.address)}
            for t in a.peers[:MAX_PEERS]]}
    return out


#: The keys of the spec this module writes.
KEYS = ("canary", "probe")


def merged(current: Mapping[str, Any] | None, node: str,
           a: Assignment) -> dict[str, Any]:
    """``current`` with its canary's part replaced by ``a``'s, the rest
    kept (the judge's)."""
    kept = {k: v for k, v in (current or {}).items() if k not in KEYS}
    return {**kept, **spec(node, a)}


def _text(raw: Mapping[str, Any], key: str, what: str, most: int) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value or len(value) > most:
        raise ValueError(f"{what}.{key} is not a string of 1-{most}")
    return value


def port_of(raw: Any, what: str = "spec.canary") -> CanaryPort:
    """A port the spec names (the canary's, or another of the node's own
    ports under ``what``), checked: ValueError says what is wrong."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{what} is not an object")
    mac = _text(raw, "mac", what, 17).lower()
    if not _MAC.match(mac) or int(mac[:2], 16) & 1:
        raise ValueError(f"{what}.mac is not a unicast MAC")
    try:
        address = ipaddress.IPv4Interface(_text(raw, "address", what,
                                                MAX_ID))
        gateway = (ipaddress.IPv4Address(raw["gateway"])
                   if raw.get("gateway") else None)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from exc
    if address.network.prefixlen >= 31 or address.ip in (
            address.network.network_address,
            address.network.broadcast_address):
        raise ValueError(f"{what}.address is not a host of its subnet")
    if gateway is not None and gateway not in address.network:
        raise ValueError(f"{what}.gateway is not in its subnet")
    return CanaryPort(_text(raw, "portId", what, MAX_ID), mac, address,
                      gateway)


def port_doc(port: CanaryPort) -> dict[str, str]:
    """What the spec says of ``port`` (read back by :func:`port_of`)."""
    out = {"portId": port.port_id, "mac": port.mac,
           "address": str(port.address)}
    if port.gateway is not None:
        out["gateway"] = str(port.gateway)
    return out


def _peers(raw: Any, node: str) -> tuple[Target, ...]:
    if not isinstance(raw, list) or len(raw) > MAX_PEERS:
        raise ValueError(f"spec.probe.peers is not a list of at most "
                         f"{MAX_PEERS}")
    out = []
    for i, item in enumerate(raw):
        what = f"spec.probe.peers[{i}]"
        if not isinstance(item, Mapping):
            raise ValueError(f"{what} is not an object")
        name = item.get("node")
        if not isinstance(name, str) or not _NAME.match(name) or \
                name == node:
            raise ValueError(f"{what}.node is not another node's name")
        try:
            address = ipaddress.IPv4Address(_text(item, "address", what,
                                                  MAX_ID))
        except ValueError as exc:
            raise ValueError(f"{what}: {exc}") from exc
        out.append(Target(name, address))
    return tuple(out)


def assignment(obj: Mapping[str, Any], node: str) -> Assignment:
    """What ``node``'s record ``obj`` asks of it; ValueError says what is
    wrong (the node then keeps what it had)."""
    spec_ = obj.get("spec")
    if not isinstance(spec_, Mapping) or spec_.get("nodeName") != node:
        raise ValueError("spec.nodeName is not this node")
    canary = None if spec_.get("canary") is None else \
        port_of(spec_["canary"])
    probe = spec_.get("probe")
    if probe is None:
        return Assignment(canary)
    if not isinstance(probe, Mapping):
        raise ValueError("spec.probe is not an object")
    interval = probe.get("intervalSeconds")
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) \
            or not MIN_INTERVAL <= interval <= MAX_INTERVAL:
        raise ValueError(f"spec.probe.intervalSeconds is not "
                         f"{MIN_INTERVAL:g}-{MAX_INTERVAL:g}")
    return Assignment(canary, _peers(probe.get("peers") or [], node),
                      float(interval))
