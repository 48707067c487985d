"""Neutron and Keystone on the wire: the adapter's error taxonomy, the
records it returns and their decoding, and the controller's port scope.

Kept apart from :mod:`.adapter` and :mod:`.neutron` (sessions, bounds,
requests) so the handler and the checks speak of ports and errors without
keystoneauth1, and a change of Neutron's JSON touches this module only. A
malformed answer leaves as :class:`OpenStackUnavailable` (an outage of the
dependency), never as a KeyError counted against a handler.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping
from typing import Any

#: Ports the controller owns carry this device_owner; device_id is the pod UID.
DEVICE_OWNER = "compute:kuryr"
#: ``device_owner`` of the nodes' canaries (a pod-like port per node, made
#: by the network_canary handler): the pods' scope filters it out.
CANARY_OWNER = "compute:kuryr-canary"
#: ``device_owner`` of the nodes' own ports into the pod network (one per
#: node, made by the network_canary handler): out of the pods' scope too.
NODE_OWNER = "compute:kuryr-node"
#: The Neutron tag naming the cluster: ``kuryr-supervisor:<cluster id>``.
TAG_PREFIX = "kuryr-supervisor:"


def cluster_tag(cluster_id: str) -> str:
    return f"{TAG_PREFIX}{cluster_id}"


def port_name(tag: str, what: str) -> str:
    """The name of a port the controller makes for ``what`` (a pod's
    ``<namespace>/<name>``, or a pool): it carries the cluster's ``tag``,
    so a port whose tags were lost (set after the create, on a Neutron
    without ``tag_ports_during_bulk_creation``) is still known as the
    cluster's (:func:`named_ours`)."""
    return f"{tag}:{what}"[:255]


def named_ours(port: Port, tag: str, owner: str = DEVICE_OWNER) -> bool:
    """Whether ``port`` is one the cluster of ``tag`` made, by what its
    create gave it: its owner (``owner``: the pods' by default) and its
    name."""
    return bool(tag) and port.device_owner == owner and \
        port.name.startswith(f"{tag}:")


@dataclasses.dataclass(frozen=True)
class Network:
    id: str
    project_id: str
    subnets: tuple[str, ...] = ()


class OpenStackError(Exception):
    def __init__(self, msg: str, status: int = 0) -> None:
        super().__init__(msg)
        self.status = status


class OpenStackUnavailable(OpenStackError):
    """Unreachable, timed out, 5xx, or authentication failed: wait it out."""


class OpenStackRefused(OpenStackError):
    """A 4xx answer: retrying the same request cannot help."""


class QuotaExceeded(OpenStackRefused):
    """Neutron refused a port: the project's port quota is used up."""


class SubnetFull(OpenStackRefused):
    """Neutron refused a port: no address is left on the pod network
    (409 ``IpAddressGenerationFailure``). A dependency's refusal, like a
    full quota: never the controller's own fault."""


class MacInUse(OpenStackRefused):
    """Neutron refused a port: another port on the network has the MAC
    asked for (409 ``MacAddressInUse``); ``mac`` is that MAC ("" when the
    answer does not say)."""

    def __init__(self, msg: str, status: int = 409, mac: str = "") -> None:
        super().__init__(msg, status)
        self.mac = mac


class NetworkMissing(OpenStackRefused):
    """The pod network does not exist (404 ``NetworkNotFound``): no
    restart fixes it."""


class SubnetMissing(OpenStackRefused):
    """The pod subnet does not exist (404 ``SubnetNotFound``, or a 400
    naming an invalid subnet): no restart fixes it."""


class Forbidden(OpenStackRefused):
    """Neutron's policy refuses the call (403), not one attribute of it:
    the controller's role was changed. No restart fixes it."""


#: Refusals no retry of the same request and no restart can fix: the pods
#: wait (an outage), the controller is not ready naming them.
UNFIXABLE = (NetworkMissing, SubnetMissing, Forbidden)

_MAC = re.compile(r"(?:[0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}")


def refined(exc: Exception) -> Exception:
    """``exc``, or the refusal it is: :class:`SubnetFull`,
    :class:`MacInUse`, :class:`NetworkMissing`, :class:`SubnetMissing` or
    :class:`Forbidden` (a 403 that refuses neither ``binding:host_id`` nor
    ``mac_address`` alone)."""
    if not isinstance(exc, OpenStackRefused) or type(exc) not in (
            OpenStackRefused,):
        return exc
    text, status = str(exc), exc.status
    if status == 409 and "IpAddressGenerationFailure" in text:
        return SubnetFull(text, status)
    if status == 409 and "MacAddressInUse" in text:
        found = _MAC.search(text.split("MacAddressInUse", 1)[1])
        return MacInUse(text, status, found.group(0).lower() if found else "")
    if status == 404 and "NetworkNotFound" in text:
        return NetworkMissing(text, status)
    if status == 404 and "SubnetNotFound" in text or \
            status == 400 and "invalid subnet" in text:
        return SubnetMissing(text, status)
    if status == 403 and not binding_refused(exc) and not mac_refused(exc):
        return Forbidden(text, status)
    return exc


def binding_refused(exc: Exception) -> bool:
    """Neutron's policy refused ``binding:host_id`` to the caller (403: a
    member role): ports are then made unbound rather than not at all."""
    return isinstance(exc, OpenStackRefused) and exc.status == 403 \
        and "binding:host_id" in str(exc)


def mac_refused(exc: Exception) -> bool:
    """Neutron's policy refused ``mac_address`` to the caller (403: not a
    member of the network's project, or an operator's policy)."""
    return isinstance(exc, OpenStackRefused) and exc.status == 403 \
        and "mac_address" in str(exc)


@dataclasses.dataclass(frozen=True)
class Port:
    id: str
    mac: str
    device_id: str
    ip: ipaddress.IPv4Address | None
    subnet_id: str
    created_at: str
    #: Neutron's status (DOWN, ACTIVE, BUILD, ERROR) and binding outcome.
    status: str = ""
    vif_type: str = ""
    tags: tuple[str, ...] = ()
    #: ``binding:host_id`` (the node it is bound to; "" unbound, or not
    #: shown to a caller Neutron's policy hides it from).
    host: str = ""
    #: What its create gave it besides the tags: its name (carrying the
    #: cluster's tag, see :func:`port_name`) and owner.
    name: str = ""
    device_owner: str = ""
    #: Its security groups' ids (the policy handler's to change).
    security_groups: tuple[str, ...] = dataclasses.field(default=(),
                                                         compare=False)

    @property
    def state(self) -> str:
        """What a PodPort says of the port: ACTIVE, DOWN, BUILD, ERROR or
        BINDING_FAILED (Neutron's ``binding:vif_type``)."""
        if self.vif_type == "binding_failed":
            return "BINDING_FAILED"
        return self.status or "DOWN"


@dataclasses.dataclass(frozen=True)
class Subnet:
    id: str
    cidr: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address | None


@dataclasses.dataclass(frozen=True)
class Token:
    expires_at: float        # epoch seconds
    project_id: str


@dataclasses.dataclass(frozen=True)
class PortQuota:
    limit: int               # -1: unlimited
    used: int
    reserved: int

    @property
    def left(self) -> int | None:
        """Ports that can still be created; None when unlimited."""
        if self.limit < 0:
            return None
        return max(0, self.limit - self.used - self.reserved)


def decode_port(obj: Mapping[str, Any]) -> Port:
    """A port of Neutron's JSON; one that lacks what a Port needs is an
    outage of the dependency (:class:`OpenStackUnavailable`)."""
    try:
        return _decode_port(obj)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise OpenStackUnavailable(f"Neutron answered a malformed port: "
                                   f"{exc!r}") from exc


def _decode_port(obj: Mapping[str, Any]) -> Port:
    ips = [ip for ip in obj.get("fixed_ips") or []
           if ipaddress.ip_address(ip.get("ip_address", "::")).version == 4]
    first = ips[0] if ips else {}
    return Port(id=str(obj["id"]), mac=str(obj.get("mac_address", "")),
                device_id=str(obj.get("device_id", "")),
                ip=ipaddress.IPv4Address(first["ip_address"]) if first else None,
                subnet_id=str(first.get("subnet_id", "")),
                created_at=str(obj.get("created_at") or ""),
                status=str(obj.get("status") or ""),
                vif_type=str(obj.get("binding:vif_type") or ""),
                tags=tuple(str(t) for t in obj.get("tags") or ()),
                host=str(obj.get("binding:host_id") or ""),
                name=str(obj.get("name") or ""),
                device_owner=str(obj.get("device_owner") or ""),
                security_groups=tuple(str(g) for g in
                                      obj.get("security_groups") or ()))
