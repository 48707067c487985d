"""Octavia on the wire: the load balancers, listeners, pools and members
the controller reads, their decoding, and Octavia's refusals.

Kept apart from :mod:`.octavia` (the requests) so the services handler
speaks of load balancers and errors without keystoneauth1, and a change of
Octavia's JSON touches this module only. A malformed answer leaves as
:class:`~.wire.OpenStackUnavailable` (an outage of the dependency), never
as a KeyError counted against a handler.

Octavia answers 409 to any write on a load balancer that is not ACTIVE
(``... is immutable and cannot be updated``: each write makes it
``PENDING_UPDATE`` for a moment): :class:`LoadBalancerBusy`, which the
handler meets by waiting and planning again from what Octavia has then.
A VIP address another load balancer (or port) holds is
:class:`VipInUse`, a refusal no retry of the same create fixes.
"""
from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kuryr_supervisor.controller.openstack.wire import (
    OpenStackError,
    OpenStackRefused,
    OpenStackUnavailable,
)

T = TypeVar("T")

#: provisioning_status values that mean a change is under way.
PENDING = ("PENDING_CREATE", "PENDING_UPDATE", "PENDING_DELETE")


class LoadBalancerBusy(OpenStackError):
    """409: the load balancer is not ACTIVE (a change is pending) or the
    write collides with one just made; wait, look again, plan again."""


class VipInUse(OpenStackRefused):
    """409: the VIP address asked for is held by another load balancer or
    port (Octavia's ``VIPAddressConflict``)."""


class QuotaMet(OpenStackRefused):
    """403: Octavia's quota of load balancers (or listeners, pools,
    members) is met for the project."""


def refined(status: int, text: str) -> OpenStackError:
    """The error an answer of HTTP ``status`` with body ``text`` means."""
    if status == 409 and "VIP IP address is already in use" in text:
        return VipInUse(text, status)
    if status == 409:
        return LoadBalancerBusy(text, status)
    if status == 403 and "Quota has been met" in text:
        return QuotaMet(text, status)
    if status == 501:           # the provider does not take an option
        return OpenStackRefused(text, status)
    if status >= 500 or status in (401, 408, 429):
        return OpenStackUnavailable(text, status)
    return OpenStackRefused(text, status)


@dataclasses.dataclass(frozen=True)
class LoadBalancer:
    id: str
    name: str
    vip: str
    #: provisioning_status: ACTIVE, PENDING_*, ERROR, DELETED.
    status: str
    tags: tuple[str, ...] = ()
    description: str = ""
    vip_subnet_id: str = ""
    operating: str = ""

    @property
    def pending(self) -> bool:
        return self.status in PENDING


@dataclasses.dataclass(frozen=True)
class Listener:
    id: str
    lb_id: str
    protocol: str
    port: int
    default_pool_id: str
    status: str = ""
    tags: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Pool:
    id: str
    lb_id: str
    protocol: str
    algorithm: str
    #: The ids of its members (the list says no more of them).
    member_ids: frozenset[str] = frozenset()
    status: str = ""
    tags: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, order=True)
class Member:
    address: str
    port: int


def _tags(obj: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(t) for t in obj.get("tags") or ())


def _first_id(items: Any) -> str:
    for item in items or ():
        if isinstance(item, Mapping) and item.get("id"):
            return str(item["id"])
    return ""


def decoded(what: str, decode: Callable[[Mapping[str, Any]], T],
            obj: Any) -> T:
    """``decode(obj)``, a malformed ``obj`` an outage of Octavia."""
    try:
        if not isinstance(obj, Mapping):
            raise TypeError(f"not an object: {type(obj).__name__}")
        return decode(obj)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise OpenStackUnavailable(f"Octavia answered a malformed {what}: "
                                   f"{exc!r}") from exc


def load_balancer(obj: Mapping[str, Any]) -> LoadBalancer:
    vip = obj.get("vip_address") or ""
    return LoadBalancer(
        id=str(obj["id"]), name=str(obj.get("name") or ""),
        vip=str(ipaddress.ip_address(vip)) if vip else "",
        status=str(obj["provisioning_status"]), tags=_tags(obj),
        description=str(obj.get("description") or ""),
        vip_subnet_id=str(obj.get("vip_subnet_id") or ""),
        operating=str(obj.get("operating_status") or ""))


def listener(obj: Mapping[str, Any]) -> Listener:
    return Listener(
        id=str(obj["id"]), lb_id=_first_id(obj.get("loadbalancers")),
        protocol=str(obj["protocol"]), port=int(obj["protocol_port"]),
        default_pool_id=str(obj.get("default_pool_id") or ""),
        status=str(obj.get("provisioning_status") or ""), tags=_tags(obj))


def pool(obj: Mapping[str, Any]) -> Pool:
    return Pool(
        id=str(obj["id"]), lb_id=_first_id(obj.get("loadbalancers")),
        protocol=str(obj["protocol"]), algorithm=str(obj["lb_algorithm"]),
        member_ids=frozenset(str(m["id"]) for m in obj.get("members") or ()),
        status=str(obj.get("provisioning_status") or ""), tags=_tags(obj))


@dataclasses.dataclass(frozen=True)
class Tree:
    """What a load balancer's status tree says: its provisioning status,
    whether anything in it is still pending, and each pool's members (by
    pool id; a member being deleted left out).

    The load balancer turns ACTIVE before its pools may (each object's
    status arrives from the provider on its own), and a write on a pool
    still pending is refused as a write on a busy load balancer: a load
    balancer is settled once nothing in its tree is pending."""

    status: str
    pending: bool
    members: Mapping[str, frozenset[Member]]
    member_ids: Mapping[str, frozenset[str]]
    #: Each pool's members' ids by member (those of :attr:`members`): a
    #: member deleted alone is deleted by its id.
    ids_of: Mapping[str, Mapping[Member, str]] = dataclasses.field(
        default_factory=dict)

    @property
    def settled(self) -> bool:
        return not self.pending


def tree(obj: Mapping[str, Any]) -> Tree:
    lb = obj["statuses"]["loadbalancer"]
    members: dict[str, frozenset[Member]] = {}
    ids: dict[str, frozenset[str]] = {}
    ids_of: dict[str, dict[Member, str]] = {}
    statuses = [lb["provisioning_status"]]
    for li in lb.get("listeners") or ():
        statuses.append(li.get("provisioning_status"))
        for p in li.get("pools") or ():
            statuses.append(p.get("provisioning_status"))
            found = [m for m in p.get("members") or ()]
            statuses += [m.get("provisioning_status") for m in found]
            ids_of[str(p["id"])] = {
                Member(str(ipaddress.ip_address(m["address"])),
                       int(m["protocol_port"])): str(m["id"]) for m in found
                if m.get("provisioning_status") != "PENDING_DELETE"}
            members[str(p["id"])] = frozenset(ids_of[str(p["id"])])
            ids[str(p["id"])] = frozenset(str(m["id"]) for m in found)
    return Tree(str(lb["provisioning_status"]),
                any(s in PENDING for s in statuses), members, ids, ids_of)
