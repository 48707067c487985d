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

Its shape is the canary's port's (:func:`~.canaryspec.port_of` checks
both); this module owns the ``nodePort`` key only, and keeps every other
writer's (:func:`merged`). A node checks what it reads
(:func:`node_port`): a spec that does not hold up is refused, and the node
keeps what it had.
"""
from __future__ import annotations

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

#: The node's port: the same record as the canary's.
NodePort = CanaryPort
#: A Neutron port id as the node puts it in OVSDB (``iface-id``).
_PORT_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z-]{0,63}$")


def merged(current: Mapping[str, Any] | None, node: str,
           port: NodePort | None) -> dict[str, Any]:
    """``current`` with its node port replaced by ``port`` (None: taken
    out), every other key kept (the canary's, the judge's)."""
    out = {k: v for k, v in (current or {}).items() if k != KEY}
    out["nodeName"] = node
    if port is not None:
        out[KEY] = port_doc(port)
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
    return port
