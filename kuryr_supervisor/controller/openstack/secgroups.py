"""Neutron's security groups and their rules, as the controller uses them:
the nodes' group (which admits the nodes' ports into the pods' group) is
found by name in the project, made, tagged, and given its rules; a group
that is not ours (the project's ``default``) is given the one rule that
admits the members of one of ours (:meth:`SecurityGroupCalls.admit_group`:
the nodes' group, the pods a NetworkPolicy selects), never twice.

Kept apart from :mod:`.neutron` (ports, subnets, quotas) so a change of
the groups' calls touches this module only. :class:`SecurityGroupCalls`
is a base of :class:`~.neutron.NeutronApi`: each call made as the
caller's mode makes it (``_bounded``), decoded here; a malformed answer is
an outage (:class:`~.wire.OpenStackUnavailable`), as for ports.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

from kuryr_supervisor.controller.openstack.wire import (
    OpenStackRefused,
    OpenStackUnavailable,
)

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class SecurityGroup:
    id: str
    name: str
    project_id: str
    created_at: str = ""
    tags: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Rule:
    """An ingress or egress rule naming a remote group (all protocols)."""

    id: str
    security_group_id: str
    direction: str
    ethertype: str
    remote_group_id: str
    protocol: str = ""


def _group(obj: Any) -> SecurityGroup:
    try:
        return SecurityGroup(
            id=str(obj["id"]), name=str(obj.get("name") or ""),
            project_id=str(obj.get("project_id") or ""),
            created_at=str(obj.get("created_at") or ""),
            tags=tuple(str(t) for t in obj.get("tags") or ()))
    except (KeyError, TypeError, AttributeError) as exc:
        raise OpenStackUnavailable(f"Neutron answered a malformed security "
                                   f"group: {exc!r}") from exc


def _rule(obj: Any) -> Rule:
    try:
        return Rule(id=str(obj["id"]),
                    security_group_id=str(obj["security_group_id"]),
                    direction=str(obj.get("direction") or ""),
                    ethertype=str(obj.get("ethertype") or ""),
                    remote_group_id=str(obj.get("remote_group_id") or ""),
                    protocol=str(obj.get("protocol") or ""))
    except (KeyError, TypeError, AttributeError) as exc:
        raise OpenStackUnavailable(f"Neutron answered a malformed security "
                                   f"group rule: {exc!r}") from exc


def _items(data: Any, key: str, what: str) -> list[Any]:
    items = data.get(key) if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise OpenStackUnavailable(f"{what}: no {key}")
    return items


class SecurityGroupCalls:
    """The calls (see the module); ``_bounded`` and ``_call`` are the
    API's mode's."""

    def _call(self, method: str, path: str, *, ok: tuple[int, ...] = (200,),
              **kwargs: Any) -> Any:
        raise NotImplementedError

    def _bounded(self, what: str, fn: Callable[..., T], *args: Any,
                 **kwargs: Any) -> T:
        raise NotImplementedError

    def security_groups(self, *, name: str,
                        project_id: str) -> list[SecurityGroup]:
        """The groups named ``name`` in the project, oldest first."""
        what = "Neutron GET /v2.0/security-groups"
        data = self._bounded(what, self._call, "GET",
                             "/v2.0/security-groups",
                             params={"name": name, "project_id": project_id})
        groups = [_group(g) for g in _items(data, "security_groups", what)]
        # Neutron filters on the name; a fake or an old one may not.
        groups = [g for g in groups if g.name == name and
                  (not g.project_id or g.project_id == project_id)]
        return sorted(groups, key=lambda g: (g.created_at, g.id))

    def create_security_group(self, *, name: str, project_id: str,
                              description: str) -> SecurityGroup:
        """One group (Neutron gives it its egress rules, no ingress)."""
        what = "Neutron POST /v2.0/security-groups"
        data = self._bounded(what, self._call, "POST",
                             "/v2.0/security-groups", ok=(201,),
                             json={"security_group": {
                                 "name": name, "project_id": project_id,
                                 "description": description}})
        if not isinstance(data, dict) or \
                not isinstance(data.get("security_group"), dict):
            raise OpenStackUnavailable(f"{what}: no security group")
        return _group(data["security_group"])

    def set_security_group_tags(self, group_id: str,
                                tags: Sequence[str]) -> list[str]:
        """Replace the group's tags (``PUT .../tags``)."""
        what = f"Neutron PUT security group {group_id} tags"
        data = self._bounded(what, self._call, "PUT",
                             f"/v2.0/security-groups/{group_id}/tags",
                             json={"tags": list(tags)})
        got = data.get("tags") if isinstance(data, dict) else None
        if not isinstance(got, list):
            raise OpenStackUnavailable(f"{what}: no tags")
        return [str(t) for t in got]

    def delete_security_group(self, group_id: str) -> bool:
        """Delete a group; False when it was already gone (a group still
        used by a port is refused: 409, raised)."""
        try:
            self._bounded("Neutron DELETE security group", self._call,
                          "DELETE", f"/v2.0/security-groups/{group_id}",
                          ok=(204,))
        except OpenStackRefused as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def security_group_rules(self, *, security_group_id: str,
                             remote_group_id: str,
                             direction: str) -> list[Rule]:
        """The rules of a group in ``direction`` naming ``remote_group_id``."""
        what = "Neutron GET /v2.0/security-group-rules"
        data = self._bounded(what, self._call, "GET",
                             "/v2.0/security-group-rules", params={
                                 "security_group_id": security_group_id,
                                 "remote_group_id": remote_group_id,
                                 "direction": direction})
        rules = [_rule(r) for r in _items(data, "security_group_rules", what)]
        return [r for r in rules if r.security_group_id == security_group_id
                and r.remote_group_id == remote_group_id
                and r.direction == direction]

    def create_security_group_rule(self, *, security_group_id: str,
                                   remote_group_id: str, direction: str,
                                   ethertype: str = "IPv4") -> str:
        """A rule admitting every protocol from (ingress) or to (egress)
        the members of ``remote_group_id``; its id, or "" when Neutron says
        it exists already (409 ``SecurityGroupRuleExists``)."""
        what = "Neutron POST /v2.0/security-group-rules"
        try:
            data = self._bounded(what, self._call, "POST",
                                 "/v2.0/security-group-rules", ok=(201,),
                                 json={"security_group_rule": {
                                     "security_group_id": security_group_id,
                                     "remote_group_id": remote_group_id,
                                     "direction": direction,
                                     "ethertype": ethertype}})
        except OpenStackRefused as exc:
            if exc.status == 409 and "Exists" in str(exc):
                return ""
            raise
        rule = data.get("security_group_rule") if isinstance(data, dict) \
            else None
        return _rule(rule).id

    def admitted(self, security_group_id: str,
                 remote_group_id: str) -> set[str]:
        """The ethertypes in which ``security_group_id`` admits ingress of
        every protocol from the members of ``remote_group_id`` (one
        GET)."""
        return {r.ethertype for r in self.security_group_rules(
            security_group_id=security_group_id,
            remote_group_id=remote_group_id, direction="ingress")
            if not r.protocol}

    def admit_group(self, security_group_id: str, remote_group_id: str,
                    ethertypes: Sequence[str] = ("IPv4",), *,
                    present: Collection[str] | None = None) -> list[str]:
        """``security_group_id`` made to admit ingress of every protocol
        from the members of ``remote_group_id`` in each of ``ethertypes``:
        a rule each that is not ``present`` (None: :meth:`admitted` asked);
        the ethertypes of the rules made now (one Neutron says exists is
        not made, and no error)."""
        if present is None:
            present = self.admitted(security_group_id, remote_group_id)
        made = []
        for ethertype in ethertypes:
            if ethertype not in present and self.create_security_group_rule(
                    security_group_id=security_group_id,
                    remote_group_id=remote_group_id, direction="ingress",
                    ethertype=ethertype):
                made.append(ethertype)
        return made
