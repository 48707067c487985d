"""A pod's Neutron port data and its checks, and the legacy pod annotation.

:class:`PortData` is the port data (port id, pod UID, MAC, address in CIDR
form, gateway) with its format checks; it is carried to the CNI role by
the PodPort custom resource (:mod:`.podport`), which only the controller
may write. The pod annotation of the same JSON (:data:`LEGACY_ANNOTATION`)
is what earlier versions used; anyone who may edit the pod can write it,
so the CNI role never reads it any more and the controller never takes it
as proof of a port. Its parser (:func:`from_pod`) stays for tools that
read old pods.

Every field is checked (types, lengths, a non-zero unicast MAC, a host
address inside its network, a gateway in the same network and not the
address itself); the CNI role checks the data again against its own
configuration (:mod:`kuryr_supervisor.cni.ipam.validation`).
"""
from __future__ import annotations

import dataclasses
import ipaddress
import json
import re
from collections.abc import Mapping
from typing import Any

#: The pod annotation earlier versions wrote the port data to (never read
#: by the daemon).
LEGACY_ANNOTATION = "kuryr-supervisor.openstack.org/port"
_MAX_BYTES = 1024
_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")


@dataclasses.dataclass(frozen=True)
class PortData:
    port_id: str
    pod_uid: str
    mac: str
    address: ipaddress.IPv4Interface
    gateway: ipaddress.IPv4Address

    def to_json(self) -> str:
        return json.dumps({"portId": self.port_id, "podUid": self.pod_uid,
                           "mac": self.mac, "address": str(self.address),
                           "gateway": str(self.gateway)}, sort_keys=True)

    @classmethod
    def parse(cls, text: str) -> PortData:
        """Validate and decode; ValueError says what is wrong."""
        if not isinstance(text, str) or len(text.encode()) > _MAX_BYTES:
            raise ValueError("not a string of at most 1 KiB")
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise ValueError("not JSON") from exc
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        return cls.from_mapping(raw)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> PortData:
        """Validate and decode decoded JSON (a PodPort's spec)."""
        fields: dict[str, str] = {}
        for key in ("portId", "podUid", "mac", "address", "gateway"):
            value = raw.get(key)
            if not isinstance(value, str):
                raise ValueError(f"{key} must be a string")
            fields[key] = value
        for key in ("portId", "podUid"):
            if not _ID.match(fields[key]):
                raise ValueError(f"bad {key}")
        mac = fields["mac"].lower()
        if not _MAC.match(mac) or int(mac[:2], 16) & 1 or \
                mac == "00:00:00:00:00:00":
            raise ValueError("mac is not a non-zero unicast MAC address")
        try:
            address = ipaddress.IPv4Interface(fields["address"])
            gateway = ipaddress.IPv4Address(fields["gateway"])
        except ValueError as exc:
            raise ValueError(f"bad address or gateway: {exc}") from exc
        net = address.network
        if net.prefixlen > 30 or address.ip in (net.network_address,
                                                net.broadcast_address):
            raise ValueError("address is not a host of a /30 or larger")
        if gateway not in net or gateway == address.ip or gateway in (
                net.network_address, net.broadcast_address):
            raise ValueError("gateway is not another host of the network")
        if address.ip.is_loopback or address.ip.is_multicast:
            raise ValueError("address is loopback or multicast")
        return cls(fields["portId"], fields["podUid"], mac, address, gateway)


def from_pod(obj: Mapping[str, Any]) -> PortData | None:
    """The pod's own, valid legacy annotation, or None (absent, invalid, or
    written for another pod UID). For tools reading pods of earlier
    versions; the daemon never binds it."""
    meta = obj.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(LEGACY_ANNOTATION)
    if text is None:
        return None
    try:
        ann = PortData.parse(text)
    except ValueError:
        return None
    return ann if ann.pod_uid == meta.get("uid") else None
