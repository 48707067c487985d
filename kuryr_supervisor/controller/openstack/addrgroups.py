"""Neutron's address groups: the sets of pods a NetworkPolicy's rules name
(``remote_address_group_id``), which ML2/OVN keeps as OVN address sets.

A rule naming an address group never changes as pods come and go: the
group's members do, each change one call (``PUT .../add_addresses`` or
``.../remove_addresses``), whatever the number of rules or policies that
name it. Neutron refuses the whole call when one address is already in
(an add) or not in (a remove) the group, so a change whose answer was
lost, or made twice, or made meanwhile by another writer (the port
handler puts a new pod's address in its sets before its PodPort), is
made again at once without what was done already: two calls then, never
an error. The refusal names the addresses; when they do not fit in the
part of its text kept (a large change), the group is read instead.

Scope: Neutron gives address groups no tags (no tags API, none in a
create); an address group the controller makes carries the cluster's tag
as its description, and the cluster's are listed with that exact filter.

The last base of :class:`~.neutron.NeutronApi` (over :mod:`.policycalls`,
whose request and list it uses): each call made as the caller's mode makes
it; records and refusals are :mod:`.sgwire`'s (:class:`~.sgwire.Missing`
for a group that is gone, :class:`~.sgwire.InUse` for a delete while a
rule names it).
"""
from __future__ import annotations

from collections.abc import Iterable

from kuryr_supervisor.controller.openstack import sgwire
from kuryr_supervisor.controller.openstack.policycalls import PolicyCalls
from kuryr_supervisor.controller.openstack.sgwire import AddressGroup, cidrs
from kuryr_supervisor.controller.openstack.wire import (
    OpenStackRefused,
    OpenStackUnavailable,
)

PATH = "/v2.0/address-groups"


class AddressGroupCalls(PolicyCalls):
    """The address-group calls (see the module)."""

    def address_groups(self, tag: str) -> list[AddressGroup]:
        """The address groups made with ``tag`` (the cluster's) as their
        description."""
        return self._listed("address_groups", PATH, {"description": tag},
                            sgwire.decode_address_group)

    def address_group(self, group_id: str) -> AddressGroup | None:
        """One address group (None: Neutron says 404)."""
        what = f"Neutron GET address group {group_id}"
        try:
            data = self._policy_call(what, "GET", f"{PATH}/{group_id}")
        except sgwire.Missing:
            return None
        return sgwire.decode_address_group(
            self._one(data, "address_group", what))

    def create_address_group(self, name: str, tag: str,
                             addresses: Iterable[str] = ()) -> AddressGroup:
        """An address group named ``name``, described by ``tag``, holding
        ``addresses`` (addresses or CIDRs: a pod's address is its /32)."""
        what = f"Neutron POST {PATH}"
        data = self._policy_call(what, "POST", PATH, ok=(201,), json={
            "address_group": {"name": name[:255], "description": tag,
                              "addresses": list(cidrs(addresses))}})
        return sgwire.decode_address_group(
            self._one(data, "address_group", what))

    def delete_address_group(self, group_id: str) -> bool:
        """Delete an address group; False if it was already gone."""
        try:
            self._policy_call(f"Neutron DELETE address group {group_id}",
                              "DELETE", f"{PATH}/{group_id}", ok=(204,))
        except sgwire.Missing:
            return False
        return True

    def add_addresses(self, group_id: str,
                      addresses: Iterable[str]) -> AddressGroup:
        """``addresses`` join the group: one call (see the module); the
        group as it is then."""
        return self._members(group_id, "add_addresses", cidrs(addresses),
                             "AddressesAlreadyExist")

    def remove_addresses(self, group_id: str,
                         addresses: Iterable[str]) -> AddressGroup:
        """``addresses`` leave the group: one call (see the module); the
        group as it is then."""
        return self._members(group_id, "remove_addresses", cidrs(addresses),
                             "AddressesNotFound")

    def _members(self, group_id: str, action: str, addresses: tuple[str, ...],
                 done_kind: str) -> AddressGroup:
        """``action`` with ``addresses``; a refusal of type ``done_kind``
        (some already done) made again without them, once."""
        what = f"Neutron PUT address group {group_id} {action}"
        todo = list(addresses)
        for _ in range(2):
            if not todo:
                break
            try:
                data = self._policy_call(what, "PUT",
                                         f"{PATH}/{group_id}/{action}",
                                         json={"addresses": todo})
            except OpenStackRefused as exc:
                if done_kind not in str(exc):
                    raise
                done = sgwire.addresses_named(exc, done_kind) or \
                    self._done(group_id, action, todo, what)
                todo = [a for a in todo if a not in done]
                continue
            return sgwire.decode_address_group(
                self._one(data, "address_group", what))
        group = self._read(group_id, what)
        joined = action == "add_addresses"
        if any((a in group.addresses) != joined for a in addresses):
            raise OpenStackUnavailable(f"{what}: not applied")
        return group

    def _read(self, group_id: str, what: str) -> AddressGroup:
        group = self.address_group(group_id)
        if group is None:
            raise sgwire.Missing(f"{what}: address group {group_id} is gone",
                                 404, "AddressGroupNotFound")
        return group

    def _done(self, group_id: str, action: str, todo: list[str],
              what: str) -> set[str]:
        """Of ``todo``, what the group already says done (read)."""
        group = self._read(group_id, what)
        joined = action == "add_addresses"
        return {a for a in todo if (a in group.addresses) == joined}
