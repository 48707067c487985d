"""Security-group rules and address groups on the wire: the records the
policy calls (:mod:`.policycalls`) return, their decoding, and Neutron's
refusals of them.

Kept apart from the calls so the policy handler speaks of rules, groups
and refusals without keystoneauth1, and a change of Neutron's JSON touches
this module only. A rule is two things: what it admits (:class:`RuleSpec`,
compared by value: the handler diffs the specs it wants against those a
group holds) and where it lives (:class:`GroupRule`: its id and group).
Specs are canonical (CIDRs normalised, the any-address prefix and any
protocol as ""), so a spec sent and the same rule read back are equal.

Refusals (the rest of the taxonomy is :mod:`.wire`'s): a 404 naming a
security group, a rule, an address group or the port whose groups are set
is :class:`Missing`; a 409 that
is not a quota is a :class:`Conflict`, either :class:`RuleExists` (the
same rule is there: its id told) or :class:`InUse` (a group still used by
a port, an address group by a rule); a met quota stays
:class:`~.wire.QuotaExceeded`. A malformed answer is an outage
(:class:`~.wire.OpenStackUnavailable`), never a KeyError.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Any

from kuryr_supervisor.controller.openstack.wire import (
    OpenStackRefused,
    OpenStackUnavailable,
)

_ANY = {"0.0.0.0/0", "::/0"}
_RULE_ID = re.compile(r"Rule id is ([0-9a-fA-F-]{36})")
_MISSING = ("SecurityGroupNotFound", "SecurityGroupRuleNotFound",
            "AddressGroupNotFound", "PortNotFound")
_IN_USE = ("SecurityGroupInUse", "AddressGroupInUse")


def cidr(address: str) -> str:
    """``address`` (an address or a CIDR) as Neutron stores it: a
    normalised CIDR, ``/32`` (``/128``) for an address (ValueError: not
    an address)."""
    return str(ipaddress.ip_network(str(address).strip(), strict=False))


def cidrs(addresses: Iterable[str]) -> tuple[str, ...]:
    """Each of ``addresses`` as :func:`cidr`, once, in order."""
    return tuple(dict.fromkeys(cidr(a) for a in addresses))


@dataclasses.dataclass(frozen=True)
class RuleSpec:
    """What a rule admits: ``direction`` ``ingress`` or ``egress``;
    ``protocol`` "" for any (else ``tcp``, ``udp``, ``sctp``, ...); a port
    range (None: every port); one remote: an address group, a CIDR or a
    security group ("" and "" and "": any address). ``description`` is
    not part of what it admits (not compared)."""

    direction: str
    ethertype: str = "IPv4"
    protocol: str = ""
    port_min: int | None = None
    port_max: int | None = None
    remote_ip_prefix: str = ""
    remote_address_group_id: str = ""
    remote_group_id: str = ""
    description: str = dataclasses.field(default="", compare=False)

    def canonical(self) -> RuleSpec:
        """This spec as Neutron stores it (see the module)."""
        prefix = cidr(self.remote_ip_prefix) if self.remote_ip_prefix else ""
        return dataclasses.replace(
            self, protocol=(self.protocol or "").lower(),
            remote_ip_prefix="" if prefix in _ANY else prefix)

    def body(self, group_id: str) -> dict[str, Any]:
        """The rule's create body in security group ``group_id``."""
        spec = self.canonical()
        body: dict[str, Any] = {"security_group_id": group_id,
                                "direction": spec.direction,
                                "ethertype": spec.ethertype}
        for key, value in (("protocol", spec.protocol),
                           ("port_range_min", spec.port_min),
                           ("port_range_max", spec.port_max),
                           ("remote_ip_prefix", spec.remote_ip_prefix),
                           ("remote_address_group_id",
                            spec.remote_address_group_id),
                           ("remote_group_id", spec.remote_group_id),
                           ("description", spec.description)):
            if value not in ("", None):
                body[key] = value
        return body


@dataclasses.dataclass(frozen=True)
class GroupRule:
    """A rule as Neutron holds it."""

    id: str
    security_group_id: str
    spec: RuleSpec


@dataclasses.dataclass(frozen=True)
class PolicyGroup:
    """A security group with its rules (by id) and tags (sorted), as
    equal as Neutron's answers are alike. ``description`` carries the
    cluster's tag from its create (see :mod:`.policycalls`): how one
    whose tag call was lost is found again."""

    id: str
    name: str
    description: str
    tags: tuple[str, ...]
    rules: tuple[GroupRule, ...] = ()
    stateful: bool = True
    project_id: str = ""

    def specs(self) -> set[RuleSpec]:
        return {r.spec for r in self.rules}


@dataclasses.dataclass(frozen=True)
class AddressGroup:
    """An address group: its ``addresses`` as CIDRs (:func:`cidr`).
    Neutron gives address groups no tags: ``description`` carries the
    cluster's tag (see :mod:`.policycalls`)."""

    id: str
    name: str
    description: str
    addresses: frozenset[str]
    project_id: str = ""


def _malformed(what: str, exc: Exception) -> OpenStackUnavailable:
    return OpenStackUnavailable(f"Neutron answered a malformed {what}: "
                                f"{exc!r}")


def _port(value: Any) -> int | None:
    return None if value is None else int(value)


def decode_rule(obj: Mapping[str, Any]) -> GroupRule:
    try:
        spec = RuleSpec(
            direction=str(obj["direction"]),
            ethertype=str(obj.get("ethertype") or "IPv4"),
            protocol=str(obj.get("protocol") or ""),
            port_min=_port(obj.get("port_range_min")),
            port_max=_port(obj.get("port_range_max")),
            remote_ip_prefix=str(obj.get("remote_ip_prefix") or ""),
            remote_address_group_id=str(
                obj.get("remote_address_group_id") or ""),
            remote_group_id=str(obj.get("remote_group_id") or ""),
            description=str(obj.get("description") or ""))
        return GroupRule(id=str(obj["id"]),
                         security_group_id=str(obj["security_group_id"]),
                         spec=spec.canonical())
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _malformed("security group rule", exc) from exc


def decode_group(obj: Mapping[str, Any]) -> PolicyGroup:
    try:
        return PolicyGroup(
            id=str(obj["id"]), name=str(obj.get("name") or ""),
            description=str(obj.get("description") or ""),
            tags=tuple(sorted(str(t) for t in obj.get("tags") or ())),
            rules=tuple(sorted((decode_rule(r) for r in
                                obj.get("security_group_rules") or ()),
                               key=lambda r: r.id)),
            stateful=bool(obj.get("stateful", True)),
            project_id=str(obj.get("project_id") or ""))
    except (KeyError, TypeError, AttributeError) as exc:
        raise _malformed("security group", exc) from exc


def decode_address_group(obj: Mapping[str, Any]) -> AddressGroup:
    try:
        return AddressGroup(
            id=str(obj["id"]), name=str(obj.get("name") or ""),
            description=str(obj.get("description") or ""),
            addresses=frozenset(cidrs(obj.get("addresses") or ())),
            project_id=str(obj.get("project_id") or ""))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _malformed("address group", exc) from exc


class Missing(OpenStackRefused):
    """404: the security group, rule, address group or port named is not
    there (``kind``: Neutron's error type)."""

    def __init__(self, msg: str, status: int = 404, kind: str = "") -> None:
        super().__init__(msg, status)
        self.kind = kind


class Conflict(OpenStackRefused):
    """409 other than a quota: what the call would change conflicts with
    what Neutron holds."""


class RuleExists(Conflict):
    """409 ``SecurityGroupRuleExists``: the same rule is in the group
    (``rule_id``: its id, "" when not told). A bulk create makes none."""

    def __init__(self, msg: str, status: int = 409,
                 rule_id: str = "") -> None:
        super().__init__(msg, status)
        self.rule_id = rule_id


class InUse(Conflict):
    """409 ``SecurityGroupInUse`` (a port has the group) or
    ``AddressGroupInUse`` (a rule names the address group)."""


def refined(exc: OpenStackRefused) -> OpenStackRefused:
    """``exc``, or the refusal of this module it is (see the module)."""
    if type(exc) is not OpenStackRefused:
        return exc
    text, status = str(exc), exc.status
    if status == 404:
        for kind in _MISSING:
            if kind in text:
                return Missing(text, status, kind)
    if status == 409 and "SecurityGroupRuleExists" in text:
        found = _RULE_ID.search(text)
        return RuleExists(text, status, found.group(1) if found else "")
    if status == 409 and any(kind in text for kind in _IN_USE):
        return InUse(text, status)
    if status == 409:
        return Conflict(text, status)
    return exc


_LISTED = re.compile(r"Addresses \[([^\]]*)\]")


def addresses_named(exc: OpenStackRefused, kind: str) -> set[str] | None:
    """The addresses a refusal of type ``kind`` names (Neutron's
    ``AddressesAlreadyExist`` on an add, ``AddressesNotFound`` on a
    remove), as CIDRs; None when ``exc`` is not that refusal."""
    text = str(exc)
    if kind not in text:
        return None
    found = _LISTED.search(text)
    if found is None:
        return None
    try:
        return {cidr(a.strip(" '\"")) for a in found.group(1).split(",")
                if a.strip(" '\"")}
    except ValueError:
        return None
