"""The node's port into the pod network, as the controller tells it in the
node's NodeNetwork record's spec.

On the OVS binding a pod's packets never cross the node's own network
stack, so the node (its kubelet's probes) reaches its pods, and they reach
it, through a Neutron port of the node's own, bound to it, plugged as an
OVS internal port in the node's namespace (OVN-Kubernetes' management
port). The controller's ``network_canary`` handler makes one per node, as
it makes the canaries, and writes it into the record's spec beside the
canary's part::

    spec:
      nodeName: node-a
      nodePort:                     # the node's own port into the pod network
        portId: "<neutron port id>"
        mac: "fa:16:3e:00:00:06"
        address: 10.0.0.6/24
        gateway: 10.0.0.1           # absent: the subnet has none
        serviceCIDR: 10.0.64.0/20   # absent: no services handler

Its port's shape is the canary's port's (:func:`~.canaryspec.port_of`
checks both). ``serviceCIDR`` is the range of the ``services`` handler's
service subnet (the cluster's ClusterIPs), which the node routes through
its port via the gateway, so that a node needs no option of its own for
its connections to Services to meet OVN's load balancers; a node's
``[node_port] service_cidr``, when set, wins. This module owns the
``nodePort`` key only, and keeps every other writer's (:func:`merged`). A
node checks what it reads (:func:`node_port`): a spec that does not hold
up is refused, and the node keeps what it had.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from kuryr_supervisor.netcheck.codecs.canaryspec import (
    CanaryPort,
    port_doc,
    port_of,
)

#: The key of the spec this module writes.
KEY = "nodePort"
KEYS = (KEY,)

#: The widest service range a spec may route through the node port: a
#: shorter prefix would take over much of the node's own traffic.
MIN_PREFIX = 8


@dataclasses.dataclass(frozen=True)
class NodePort(CanaryPort):
    """The node's own port (a canary port's fields), and the service
    range routed through it (None: none named)."""

    service_cidr: ipaddress.IPv4Network | None = None


def service_range(value: str, what: str = "serviceCIDR"
                  ) -> ipaddress.IPv4Network:
    """``value`` as a service range to route through the node port;
    ValueError says why it cannot be one (not a network, wider than
    :data:`MIN_PREFIX`, or not unicast space a Service can be given)."""
    try:
        cidr = ipaddress.IPv4Network(value)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from exc
    if cidr.prefixlen < MIN_PREFIX:
        raise ValueError(f"{what} {cidr} is wider than /{MIN_PREFIX}")
    if cidr.is_loopback or cidr.is_link_local or cidr.is_multicast or \
            cidr.is_reserved or cidr.is_unspecified:
        raise ValueError(f"{what} {cidr} is not unicast space for Services")
    return cidr
#: A Neutron port id as the node puts it in OVSDB (``iface-id``).
_PORT_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z-]{0,63}$")


def merged(current: Mapping[str, Any] | None, node: str,
           port: NodePort | None) -> dict[str, Any]:
    """``current`` with its node port replaced by ``port`` (None: taken
    out), every other key kept (the canary's, the judge's)."""
    out = {k: v for k, v in (current or {}).items() if k != KEY}
    out["nodeName"] = node
    if port is not None:
        doc: dict[str, Any] = port_doc(port)
        if port.service_cidr is not None:
            doc["serviceCIDR"] = str(port.service_cidr)
        out[KEY] = doc
    return out


def node_port(obj: Mapping[str, Any], node: str) -> NodePort | None:
    """The node port ``node``'s record ``obj`` names (None: none);
    ValueError says what is wrong."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping) or spec.get("nodeName") != node:
        raise ValueError("spec.nodeName is not this node")
    raw = spec.get(KEY)
    if raw is None:
        return None
    port = port_of(raw, f"spec.{KEY}")
    if not _PORT_ID.match(port.port_id):
        raise ValueError(f"spec.{KEY}.portId is not a Neutron port id")
    if port.gateway == port.address.ip:
        raise ValueError(f"spec.{KEY}.gateway is its own address")
    cidr = None
    if raw.get("serviceCIDR") is not None:
        if not isinstance(raw["serviceCIDR"], str) or \
                len(raw["serviceCIDR"]) > 64:
            raise ValueError(f"spec.{KEY}.serviceCIDR is not a CIDR")
        cidr = service_range(raw["serviceCIDR"], f"spec.{KEY}.serviceCIDR")
        if port.gateway is None:
            raise ValueError(f"spec.{KEY}.serviceCIDR needs a gateway")
        if cidr.overlaps(port.address.network):
            raise ValueError(f"spec.{KEY}.serviceCIDR {cidr} overlaps the "
                             f"port's subnet {port.address.network}")
    return NodePort(port.port_id, port.mac, port.address, port.gateway,
                    cidr)
