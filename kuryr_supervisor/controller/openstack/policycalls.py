"""The Neutron calls of NetworkPolicy's security groups: groups listed by
tag with their rules, made tagged, deleted; rules made in bulk and
deleted; a port's groups set (the address groups their rules name are
:mod:`.addrgroups`').

A base of :class:`~.neutron.NeutronApi` (through :mod:`.addrgroups`), over
:mod:`.secgroups`' calls (whose tag call and delete it reuses): each call
made as the caller's mode makes it (``_bounded``: the adapter's bounded
calls, or ``within``'s direct ones), decoded and refused as :mod:`.sgwire`
says; a met quota is :class:`~.wire.QuotaExceeded` naming the quota.

Scope: the cluster's tag. A group is created with the tag as its
description, then tagged (``PUT .../tags``: Neutron 29 refuses tags in a
group's create); lists are filtered by Neutron on the tags, and a group
whose tag call was lost is found by its description
(:meth:`PolicyCalls.untagged_policy_groups`).

Costs: a list is one call a page (:data:`PAGE_SIZE`), each group with its
rules; the rules of a policy are one POST however many (all or nothing, as
Neutron's bulk create).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from kuryr_supervisor.controller.openstack import sgwire
from kuryr_supervisor.controller.openstack.secgroups import SecurityGroupCalls
from kuryr_supervisor.controller.openstack.sgwire import (
    GroupRule,
    PolicyGroup,
    RuleSpec,
)
from kuryr_supervisor.controller.openstack.wire import (
    OpenStackRefused,
    OpenStackUnavailable,
    QuotaExceeded,
)

T = TypeVar("T")

#: Objects per page of a list.
PAGE_SIZE = 500
#: A list of more pages than this is a loop.
MAX_PAGES = 1000


class PolicyCalls(SecurityGroupCalls):
    """The calls (see the module) beside :mod:`.secgroups`' own;
    ``_bounded`` and ``_call`` are the API's mode's."""

    def _policy_call(self, what: str, method: str, path: str, *,
                     ok: tuple[int, ...] = (200,), quota: str = "",
                     **kwargs: Any) -> Any:
        """One request; its refusal as :func:`.sgwire.refined` has it, a
        met quota naming ``quota``."""
        try:
            return self._bounded(what, self._call, method, path, ok=ok,
                                 **kwargs)
        except QuotaExceeded as exc:
            raise QuotaExceeded(f"{what}: the project's {quota or 'a'} "
                                "quota is met", exc.status) from exc
        except OpenStackRefused as exc:
            raise sgwire.refined(exc) from exc

    def _listed(self, plural: str, path: str,
                params: Mapping[str, str | list[str]],
                decode: Callable[[Mapping[str, Any]], T]) -> list[T]:
        """Every object ``params`` select, page by page (``limit`` and
        ``marker``, as Neutron pages)."""
        what = f"Neutron GET {path}"
        query: dict[str, Any] = dict(params, limit=str(PAGE_SIZE))
        out: list[T] = []
        for _ in range(MAX_PAGES):
            data = self._policy_call(what, "GET", path, params=query)
            items = data.get(plural) if isinstance(data, dict) else None
            if not isinstance(items, list) or not all(
                    isinstance(i, dict) for i in items):
                raise OpenStackUnavailable(f"{what}: no {plural} list")
            out += [decode(i) for i in items]
            links = data.get(f"{plural}_links")
            more = isinstance(links, list) and any(
                isinstance(link, dict) and link.get("rel") == "next"
                for link in links)
            if not more or not items:
                return out
            query["marker"] = str(items[-1].get("id"))
        raise OpenStackUnavailable(f"{what}: more than {MAX_PAGES} pages")

    @staticmethod
    def _one(data: Any, key: str, what: str) -> Mapping[str, Any]:
        obj = data.get(key) if isinstance(data, dict) else None
        if not isinstance(obj, dict):
            raise OpenStackUnavailable(f"{what}: no {key}")
        return obj

    # -- security groups ------------------------------------------------------
    def policy_groups(self, tag: str, *more: str) -> list[PolicyGroup]:
        """The groups tagged ``tag`` (the cluster's) and every one of
        ``more``, with their rules."""
        return self._listed("security_groups", "/v2.0/security-groups",
                            {"tags": ",".join((tag, *more))},
                            sgwire.decode_group)

    def untagged_policy_groups(self, tag: str) -> list[PolicyGroup]:
        """The groups made with ``tag`` as their description that lack
        the tag: their tag call was lost (the controller died between
        the create and the call)."""
        return self._listed("security_groups", "/v2.0/security-groups",
                            {"description": tag, "not-tags": tag},
                            sgwire.decode_group)

    def policy_group(self, group_id: str) -> PolicyGroup | None:
        """One group with its rules (None: Neutron says 404)."""
        what = f"Neutron GET security group {group_id}"
        try:
            data = self._policy_call(what, "GET",
                                     f"/v2.0/security-groups/{group_id}")
        except sgwire.Missing:
            return None
        return sgwire.decode_group(self._one(data, "security_group", what))

    def create_policy_group(self, name: str, tag: str,
                            tags: Sequence[str] = (), *,
                            stateful: bool = True) -> PolicyGroup:
        """A group named ``name`` described by ``tag``, then tagged with
        ``tag`` and ``tags``: the group as Neutron made it (with the
        egress rules it gives every group) and its tags as the tag call
        set them; a tag call that fails raises, the group left for
        :meth:`untagged_policy_groups` to find."""
        what = "Neutron POST /v2.0/security-groups"
        data = self._policy_call(
            what, "POST", "/v2.0/security-groups", ok=(201,),
            quota="security group", json={"security_group": {
                "name": name[:255], "description": tag,
                "stateful": stateful}})
        group = sgwire.decode_group(self._one(data, "security_group", what))
        wanted = tuple(dict.fromkeys((tag, *tags)))
        try:
            got = self.set_security_group_tags(group.id, wanted)
        except OpenStackRefused as exc:
            raise sgwire.refined(exc) from exc
        return dataclasses.replace(group, tags=tuple(sorted(got)))

    def delete_policy_group(self, group_id: str) -> bool:
        """Delete a group and its rules; False if it was already gone;
        :class:`~.sgwire.InUse` while a port has it."""
        try:
            return self.delete_security_group(group_id)
        except OpenStackRefused as exc:
            raise sgwire.refined(exc) from exc

    # -- rules ----------------------------------------------------------------
    def create_rules(self, group_id: str,
                     specs: Iterable[RuleSpec]) -> list[GroupRule]:
        """``specs`` in group ``group_id``: one POST, all or nothing (a
        rule already there, :class:`~.sgwire.RuleExists`, makes none);
        the rules in request order. No spec: no call."""
        bodies = [s.body(group_id) for s in dict.fromkeys(
            s.canonical() for s in specs)]
        if not bodies:
            return []
        what = f"Neutron POST /v2.0/security-group-rules (bulk of {len(bodies)})"
        data = self._policy_call(what, "POST", "/v2.0/security-group-rules",
                                 ok=(201,), quota="security group rule",
                                 json={"security_group_rules": bodies})
        items = data.get("security_group_rules") if isinstance(data, dict) \
            else None
        if not isinstance(items, list) or len(items) != len(bodies):
            raise OpenStackUnavailable(f"{what}: not one rule per request")
        return [sgwire.decode_rule(r) for r in items]

    def delete_rule(self, rule_id: str) -> bool:
        """Delete a rule; False if it was already gone."""
        try:
            self._policy_call(f"Neutron DELETE rule {rule_id}", "DELETE",
                              f"/v2.0/security-group-rules/{rule_id}",
                              ok=(204,))
        except sgwire.Missing:
            return False
        return True

    def set_port_security_groups(self, port_id: str,
                                 group_ids: Sequence[str]) -> tuple[str, ...]:
        """The port's groups become ``group_ids`` (one PUT): the groups
        Neutron answers, checked applied."""
        what = f"Neutron PUT port {port_id} security_groups"
        data = self._policy_call(what, "PUT", f"/v2.0/ports/{port_id}",
                                 json={"port": {"security_groups":
                                                list(group_ids)}})
        got = self._one(data, "port", what).get("security_groups")
        if not isinstance(got, list) or set(map(str, got)) != set(group_ids):
            raise OpenStackUnavailable(f"{what}: the update was not applied")
        return tuple(str(g) for g in got)
