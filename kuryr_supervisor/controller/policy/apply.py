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
   Then the default groups' rules (:attr:`.desired.Desired.default_rules`:
   ingress from the ``selected`` marker) made where missing, before a port
   leaves the default groups for the marker: what it reached stays
   reachable. What a default group holds is asked once after each full
   look (one GET), then known: a restart writes nothing, a rule deleted
   behind the handler's back is made again after the next look;
3. the pods' ports (:mod:`.portgroups`): one PUT per port whose groups
   differ (a pod no policy selects any more goes back to the default
   groups); at most ``ports_per_pass`` a pass, the rest in the next;
4. what no policy needs (:mod:`.sweep`, only where the listings proved
   themselves ours, :mod:`.inventory`): security groups (each port still
   carrying one first given its groups without it), then address groups,
   and the duplicates of a lost create.

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

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from kuryr_supervisor.controller.openstack import sgwire
from kuryr_supervisor.controller.openstack.sgwire import RuleSpec
from kuryr_supervisor.controller.openstack.wire import OpenStackRefused
from kuryr_supervisor.controller.policy.desired import Desired
from kuryr_supervisor.controller.policy.inventory import Inventory, PortView
from kuryr_supervisor.controller.policy.naming import POLICY_TAG, Naming
from kuryr_supervisor.controller.policy.portgroups import PortGroups
from kuryr_supervisor.controller.policy.rules import SgRule
from kuryr_supervisor.controller.policy.sweep import sweep
from kuryr_supervisor.controller.policy.tally import Result, Tally, owners


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


class Pass:
    """See the module; ``api`` the calls, ``uids`` pod key -> UID,
    ``find_ports`` the ports of pods the inventory does not know."""

    def __init__(self, api: Any, naming: Naming, desired: Desired,
                 inventory: Inventory, *, uids: Mapping[tuple[str, str], str],
                 find_ports: Callable[[list[str]], dict[str, list[PortView]]],
                 ports_per_pass: int) -> None:
        self.api, self.naming, self.desired = api, naming, desired
        self.inv, self.uids, self.find_ports = inventory, uids, find_ports
        self.tally = Tally(owners(desired, naming))
        self.out = self.tally.out
        self.ports = PortGroups(api, inventory, self.tally,
                                budget=ports_per_pass)

    def run(self) -> Result:
        self._address_groups()
        self._groups()
        self._default_rules()
        self.ports.apply(self.desired.ports, self.uids, self.find_ports)
        if self.inv.proven:
            sweep(self.api, self.inv, self.desired, self.tally, self.ports)
        return self.out

    def _refused(self, name: str, exc: OpenStackRefused) -> None:
        self.tally.refused(name, exc)

    def _wait(self, names: list[str]) -> None:
        self.tally.wait(names)

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
                self.out.again()
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
                self.out.again()
                self._wait([name])
            except sgwire.RuleExists:
                self.out.again()      # read it again first
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

    # -- 2b. the default groups' rules --------------------------------------
    def _default_rules(self) -> None:
        inv = self.inv
        for rule in sorted(self.desired.default_rules, key=SgRule.sort_key):
            name = rule.remote_group or ""
            remote = inv.groups.get(name)
            if remote is None:
                self._wait([name])        # the marker is not made yet
                continue
            for group_id in inv.admitting():
                key = (group_id, remote.id)
                try:
                    if key not in inv.admitted:
                        inv.admitted[key] = self.api.admitted(*key)
                    made = self.api.admit_group(
                        *key, [rule.ethertype], present=inv.admitted[key])
                except OpenStackRefused as exc:
                    if exc.status == 404:       # a group gone meanwhile
                        self.out.again()
                        self._wait([name])
                    else:
                        self._refused(name, exc)
                    continue
                inv.admitted[key].add(rule.ethertype)
                self.out.writes["rule"] += len(made)
