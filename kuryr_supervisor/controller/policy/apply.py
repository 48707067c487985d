"""One pass of the network_policy handler: Neutron brought to the
desired state (:mod:`.desired`), from what the handler knows Neutron holds
(:mod:`.inventory`), writing only what differs.

The order keeps every pod's access as narrow as its policies at every
step, and every delete possible:

1. address groups: made with their members, or their members changed
   (one call to add, one to remove: a pod that joins a selected set costs
   one call per set, never a rule);
2. security groups: made (then Neutron's two "allow all egress" rules
   removed), their missing rules made in one bulk call, then the rules no
   longer wanted deleted;
3. the pods' ports: one PUT per port whose groups differ (a pod no policy
   selects any more goes back to the default groups); at most
   ``ports_per_pass`` a pass, the rest in the next;
4. what no policy needs (only where the listings proved themselves ours,
   :mod:`.inventory`): security groups (each port still carrying one
   first given its groups without it), then address groups, and the
   duplicates of a lost create.

Failures: a Neutron that does not answer ends the pass
(:class:`~..openstack.wire.OpenStackUnavailable`, raised: the next pass
looks at everything again); a refusal (a quota met, a conflict) fails
the objects it concerns and the policies that need them, and the pass goes
on with the rest. What is gone already (404) is done when deleting and
looked for again when changing; a group still in use when deleted
(``InUse``: a port the handler does not know, a rule of a group whose
change failed) waits for the next pass.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kuryr_supervisor.controller.openstack import sgwire
from kuryr_supervisor.controller.openstack.sgwire import RuleSpec
from kuryr_supervisor.controller.openstack.wire import OpenStackRefused
from kuryr_supervisor.controller.policy.desired import Desired
from kuryr_supervisor.controller.policy.inventory import Inventory, PortView
from kuryr_supervisor.controller.policy.naming import POLICY_TAG, Naming
from kuryr_supervisor.controller.policy.rules import SgRule

LOG = logging.getLogger(__name__)

#: The owner of the handler's own groups: every policy needs them.
EVERY = "*"


@dataclasses.dataclass
class Result:
    """What a pass did and left: writes by kind, the policies (UIDs, or
    :data:`EVERY`) whose objects Neutron refused (with its words) or that
    wait for something (a pod's port not made yet, a group in use)."""

    writes: collections.Counter[str] = dataclasses.field(
        default_factory=collections.Counter)
    failed: dict[str, str] = dataclasses.field(default_factory=dict)
    pending: set[str] = dataclasses.field(default_factory=set)
    #: A full look is needed before the next pass (something vanished).
    look_again: bool = False
    #: Objects no policy needs that could not be deleted yet (in use).
    leftover: int = 0


def rule_spec(rule: SgRule, address_groups: Mapping[str, Any]
              ) -> RuleSpec | None:
    """``rule`` as Neutron's (None: the address group it names is not
    made yet)."""
    group_id = ""
    if rule.remote_address_group:
        made = address_groups.get(rule.remote_address_group)
        if made is None:
            return None
        group_id = made.id
    return RuleSpec(rule.direction, rule.ethertype, rule.protocol or "",
                    rule.port_range_min, rule.port_range_max,
                    rule.remote_ip_prefix or "", group_id).canonical()


def owners(desired: Desired, naming: Naming) -> dict[str, set[str]]:
    """Object name -> the policies that need it (a group: its policy or
    :data:`EVERY`; an address group: those whose rules name it)."""
    out: dict[str, set[str]] = {}
    for name, group in desired.groups.items():
        uid = naming.uid_of(name) or EVERY
        out.setdefault(name, set()).add(uid)
        for rule in group.rules:
            if rule.remote_address_group:
                out.setdefault(rule.remote_address_group, set()).add(uid)
    return out


class Pass:
    """See the module; ``api`` the calls, ``uids`` pod key -> UID,
    ``find_ports`` the ports of pods the inventory does not know."""

    def __init__(self, api: Any, naming: Naming, desired: Desired,
                 inventory: Inventory, *, uids: Mapping[tuple[str, str], str],
                 find_ports: Callable[[list[str]], dict[str, list[PortView]]],
                 ports_per_pass: int) -> None:
        self.api, self.naming, self.desired = api, naming, desired
        self.inv, self.uids, self.find_ports = inventory, uids, find_ports
        self.ports_per_pass = ports_per_pass
        self.owners = owners(desired, naming)
        self.out = Result()

    def run(self) -> Result:
        self._address_groups()
        self._groups()
        self._ports()
        if self.inv.proven:
            self._sweep()
        return self.out

    # -- outcomes ---------------------------------------------------------
    def _refused(self, name: str, exc: OpenStackRefused) -> None:
        LOG.info("Neutron refuses a change of %s: %s", name, exc)
        for uid in self.owners.get(name, {EVERY}):
            self.out.failed.setdefault(uid, str(exc)[:400])

    def _wait(self, names: Iterable[str]) -> None:
        for name in names:
            self.out.pending |= self.owners.get(name, {EVERY})

    # -- 1. address groups ------------------------------------------------
    def _address_groups(self) -> None:
        api, inv, tag = self.api, self.inv, self.naming.cluster_tag
        for name, want in sorted(self.desired.address_groups.items()):
            have = inv.address_groups.get(name)
            try:
                if have is None:
                    inv.address_groups[name] = api.create_address_group(
                        name, tag, sorted(want.addresses))
                    self.out.writes["address_group"] += 1
                    continue
                wanted = frozenset(sgwire.cidrs(want.addresses))
                if wanted - have.addresses:
                    have = api.add_addresses(
                        have.id, sorted(wanted - have.addresses))
                    self.out.writes["members"] += 1
                if have.addresses - wanted:
                    have = api.remove_addresses(
                        have.id, sorted(have.addresses - wanted))
                    self.out.writes["members"] += 1
                inv.address_groups[name] = have
            except sgwire.Missing:
                inv.address_groups.pop(name, None)
                self.out.look_again = True
                self._wait([name])
            except OpenStackRefused as exc:
                self._refused(name, exc)

    # -- 2. security groups -----------------------------------------------
    def _groups(self) -> None:
        for name, want in sorted(self.desired.groups.items()):
            specs = [rule_spec(r, self.inv.address_groups)
                     for r in sorted(want.rules, key=SgRule.sort_key)]
            if any(s is None for s in specs):
                self._wait([name])      # an address group it names failed
                continue
            try:
                self._group(name, {s for s in specs if s is not None})
            except sgwire.Missing:
                self.inv.groups.pop(name, None)
                self.out.look_again = True
                self._wait([name])
            except sgwire.RuleExists:
                self.out.look_again = True      # read it again first
                self._wait([name])
            except OpenStackRefused as exc:
                self._refused(name, exc)

    def _group(self, name: str, wanted: set[RuleSpec]) -> None:
        api, inv = self.api, self.inv
        have = inv.groups.get(name)
        if have is None:
            have = api.create_policy_group(name, self.naming.cluster_tag,
                                           [POLICY_TAG])
            inv.groups[name] = have
            self.out.writes["group"] += 1
        present = {r.spec for r in have.rules}
        missing = sorted(wanted - present, key=repr)
        made = api.create_rules(have.id, missing) if missing else []
        if made:
            self.out.writes["rule"] += 1
        rules = [r for r in have.rules] + made
        inv.groups[name] = dataclasses.replace(have, rules=tuple(rules))
        # Neutron's own egress rules of a new group are among these.
        for rule in [r for r in have.rules if r.spec not in wanted]:
            api.delete_rule(rule.id)            # False: gone already
            self.out.writes["delete"] += 1
            rules.remove(rule)
            inv.groups[name] = dataclasses.replace(have, rules=tuple(rules))

    # -- 3. the pods' ports -----------------------------------------------
    def _ports(self) -> None:
        inv, ours = self.inv, self.inv.group_ids()
        wanted: dict[str, tuple[str, ...] | None] = {}
        for key, uid in sorted(self.uids.items()):
            if uid:
                wanted[uid] = self.desired.ports.get(key)
        unknown = [uid for uid, names in wanted.items()
                   if names is not None and uid not in inv.ports]
        if unknown:
            found = self.find_ports(unknown)
            inv.ports.update(found)
        budget = self.ports_per_pass
        for uid, views in sorted(inv.ports.items()):
            if uid not in wanted:
                continue        # not a pod's port, or its pod is gone: _sweep
            names = wanted[uid]
            target = self._target(names, ours)
            if target is None:
                continue
            for view in views:
                if set(view.groups) == set(target) or (
                        names is None and not set(view.groups) & ours):
                    continue
                if budget <= 0:
                    self._wait(names or ())
                    continue
                budget -= 1
                self._set_port(view, target, names or ())
        for uid, names in wanted.items():
            if names is not None and uid not in inv.ports:
                self._wait(names)       # its port is not made yet

    def _target(self, names: tuple[str, ...] | None,
                ours: set[str]) -> tuple[str, ...] | None:
        """The group ids a port should carry (None: leave it as it is:
        no policy selects it and it carries none of ours, or a group it
        needs is not made yet)."""
        if names is None:
            return self.inv.defaults
        missing = [n for n in names if n not in self.inv.groups]
        if missing:
            self._wait(names)
            return None
        return tuple(self.inv.groups[n].id for n in names)

    def _set_port(self, view: PortView, target: tuple[str, ...],
                  names: Iterable[str]) -> None:
        try:
            view.groups = tuple(self.api.set_port_security_groups(
                view.id, list(target)))
            self.out.writes["port"] += 1
        except sgwire.Missing:
            self.out.look_again = True
        except OpenStackRefused as exc:
            if exc.status == 404:       # the port is gone (its pod too)
                self.out.look_again = True
                return
            LOG.info("Neutron refuses port %s's groups: %s", view.id, exc)
            for name in names:
                self._refused(name, exc)
            if not names:
                self.out.failed.setdefault(EVERY, str(exc)[:400])

    # -- 4. what no policy needs --------------------------------------------
    def _sweep(self) -> None:
        inv = self.inv
        for name, group in sorted(inv.groups.items()):
            if name not in self.desired.groups:
                if self._delete_group(group):
                    del inv.groups[name]
        for name, ag in sorted(inv.address_groups.items()):
            if name not in self.desired.address_groups:
                if self._delete(ag.id, self.api.delete_address_group):
                    del inv.address_groups[name]
        for extra in list(inv.duplicates):
            delete = self.api.delete_address_group \
                if isinstance(extra, sgwire.AddressGroup) \
                else self._group_deleter
            if self._delete(extra.id, delete):
                inv.duplicates.remove(extra)

    def _group_deleter(self, group_id: str) -> bool:
        for views in self.inv.ports.values():
            for view in views:
                if group_id in view.groups:
                    left = tuple(g for g in view.groups if g != group_id)
                    self._set_port(view, left or self.inv.defaults, ())
        return bool(self.api.delete_policy_group(group_id))

    def _delete_group(self, group: sgwire.PolicyGroup) -> bool:
        return self._delete(group.id, self._group_deleter)

    def _delete(self, object_id: str, delete: Callable[[str], bool]) -> bool:
        """Delete one object: True once it is gone (404 included); in use
        or refused: left for the next pass."""
        try:
            delete(object_id)
        except sgwire.InUse as exc:
            LOG.info("%s still in use, deleted later: %s", object_id, exc)
            self.out.leftover += 1
            # A port the handler does not know yet may hold it: the next
            # pass looks at every port first.
            self.out.look_again = True
            return False
        except sgwire.Missing:
            return True
        except OpenStackRefused as exc:
            LOG.info("Neutron refuses to delete %s: %s", object_id, exc)
            self.out.leftover += 1
            return False
        self.out.writes["delete"] += 1
        return True
