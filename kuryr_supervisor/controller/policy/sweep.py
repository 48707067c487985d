"""Step 4 of a pass of the network_policy handler (:mod:`.apply`): what no
NetworkPolicy needs any more, deleted, only where the listings proved
themselves ours (:mod:`.inventory`).

Security groups first (a port still carrying one given its groups
without it: the defaults if none is left), then address groups (no rule
names them any more), then the duplicates of a lost create. Gone already
(404) is done; in use (a port the handler does not know yet, a rule of a
group whose change failed) waits for the next pass, which looks at every
port first; a refusal is left for later, said in the log.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kuryr_supervisor.controller.openstack import sgwire
from kuryr_supervisor.controller.openstack.wire import OpenStackRefused
from kuryr_supervisor.controller.policy.desired import Desired
from kuryr_supervisor.controller.policy.inventory import Inventory
from kuryr_supervisor.controller.policy.portgroups import PortGroups
from kuryr_supervisor.controller.policy.tally import Tally

LOG = logging.getLogger(__name__)


def sweep(api: Any, inventory: Inventory, desired: Desired, tally: Tally,
          ports: PortGroups) -> None:
    """See the module."""
    Sweep(api, inventory, tally, ports).run(desired)


class Sweep:
    def __init__(self, api: Any, inventory: Inventory, tally: Tally,
                 ports: PortGroups) -> None:
        self.api, self.inv, self.tally, self.ports = api, inventory, tally, \
            ports
        self.out = tally.out

    def run(self, desired: Desired) -> None:
        inv = self.inv
        for name, group in sorted(inv.groups.items()):
            if name not in desired.groups:
                if self._delete(group.id, self._group_deleter):
                    del inv.groups[name]
        for name, ag in sorted(inv.address_groups.items()):
            if name not in desired.address_groups:
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
                    self.ports.set(view, left or self.inv.defaults, ())
        return bool(self.api.delete_policy_group(group_id))

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
            self.out.again()
            return False
        except sgwire.Missing:
            return True
        except OpenStackRefused as exc:
            LOG.info("Neutron refuses to delete %s: %s", object_id, exc)
            self.out.leftover += 1
            return False
        self.out.writes["delete"] += 1
        return True
