"""The canary Service's part of a NodeNetwork record's spec: the VIP a
node's canary reaches through the Services' load balancers.

Where the controller runs the ``services`` handler, its
``network_canary`` handler keeps one selector-less Service of its own
(:mod:`kuryr_supervisor.netcheck.judge.canaryservice`) whose endpoints are
the nodes' canaries, so Octavia's OVN provider gives it a load balancer as
any Service; it tells each node whose canary is up the Service's
``clusterIP`` and port::

    spec:
      canaryService:
        address: 10.43.0.10      # the canary Service's clusterIP (the VIP)
        port: 8094               # the Service's port

The node's canary then reaches the VIP each round besides its peers (a
TCP exchange: the load balancer hands it to one of the canaries, which
answers as to a peer) and says so in its record's status
(``service``); the judge tells a node whose load-balancer flows are gone
from an outage of the Services for every node (Octavia, OVN Northbound).

The key is separate from the canary's (:mod:`.canaryspec`) and the
judge's (:mod:`.clusterspec`): each writer replaces its own keys and
keeps the rest. A node checks what it reads (:func:`target`): a unicast
IPv4 address that is no loopback, link-local, multicast or unspecified
one, a port of 1-65535; anything else is refused and the node probes no
VIP.
"""
from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from typing import Any

#: The key of this part of the spec.
KEY = "canaryService"
KEYS = (KEY,)


@dataclasses.dataclass(frozen=True)
class ServiceTarget:
    """The canary Service's VIP and port."""

    address: ipaddress.IPv4Address
    port: int


def field(target: ServiceTarget) -> dict[str, Any]:
    """The spec's ``canaryService`` for ``target``."""
    return {"address": str(target.address), "port": target.port}


def merged(spec: Mapping[str, Any] | None, node: str,
           target: ServiceTarget | None) -> dict[str, Any]:
    """``spec`` with this part set to ``target`` (None: taken out), the
    rest kept."""
    out = {k: v for k, v in (spec or {}).items() if k != KEY}
    out["nodeName"] = node
    if target is not None:
        out[KEY] = field(target)
    return out


def parse(raw: Any) -> ServiceTarget:
    """``spec.canaryService`` checked; ValueError says what is wrong."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"spec.{KEY} is not an object")
    text = raw.get("address")
    if not isinstance(text, str) or not 7 <= len(text) <= 15:
        raise ValueError(f"spec.{KEY}.address is not an IPv4 address")
    try:
        address = ipaddress.IPv4Address(text)
    except ValueError as exc:
        raise ValueError(f"spec.{KEY}.address: {exc}") from exc
    if address.is_loopback or address.is_link_local or \
            address.is_multicast or address.is_unspecified or \
            address.is_reserved or address == ipaddress.IPv4Address(
                "255.255.255.255"):
        raise ValueError(f"spec.{KEY}.address is not a unicast address")
    port = raw.get("port")
    if isinstance(port, bool) or not isinstance(port, int) or \
            not 1 <= port <= 65535:
        raise ValueError(f"spec.{KEY}.port is not 1-65535")
    return ServiceTarget(address, port)


def target(obj: Mapping[str, Any], node: str) -> ServiceTarget | None:
    """The VIP ``node``'s record ``obj`` asks it to reach (None: none);
    ValueError says what is wrong."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping) or spec.get("nodeName") != node:
        raise ValueError("spec.nodeName is not this node")
    raw = spec.get(KEY)
    return None if raw is None else parse(raw)
