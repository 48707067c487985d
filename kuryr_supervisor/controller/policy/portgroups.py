"""Step 3 of a pass of the network_policy handler (:mod:`.apply`): the
pods' ports given their groups.

A pod's port is found as the port handler finds it: its ``device_id`` is
the pod's UID (the inventory's full look lists them all; a pod it does
not know is looked up, a few lists for many pods). One ``PUT`` per port
whose groups differ from what the model asks, at most ``budget`` a pass
(the rest wait for the next); a pod no policy selects any more goes back
to the default groups, and one that never carried a group of ours is
left alone (a port in no group counts as ours: the port handler made it
so, its pod's groups not made yet, :mod:`~kuryr_supervisor.controller.
ports.guard`). A port gone meanwhile (404) asks for a full look; a refusal
fails the policies whose groups it was to carry.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kuryr_supervisor.controller.openstack import sgwire
from kuryr_supervisor.controller.openstack.wire import OpenStackRefused
from kuryr_supervisor.controller.policy.inventory import Inventory, PortView
from kuryr_supervisor.controller.policy.tally import EVERY, Tally

LOG = logging.getLogger(__name__)


class PortGroups:
    """See the module."""

    def __init__(self, api: Any, inventory: Inventory, tally: Tally, *,
                 budget: int) -> None:
        self.api, self.inv, self.tally = api, inventory, tally
        self.budget = budget

    def apply(self, ports: Mapping[tuple[str, str], tuple[str, ...]],
              uids: Mapping[tuple[str, str], str],
              find_ports: Callable[[list[str]], dict[str, list[PortView]]]
              ) -> None:
        """Each pod's port (``uids``: pod key -> UID, its ``device_id``)
        given the groups ``ports`` names for it (absent: the defaults,
        if it carries one of ours); ``find_ports``: the ports of pods the
        inventory does not know."""
        inv, ours = self.inv, self.inv.group_ids()
        wanted: dict[str, tuple[str, ...] | None] = {}
        for key, uid in sorted(uids.items()):
            if uid:
                wanted[uid] = ports.get(key)
        unknown = [uid for uid, names in wanted.items()
                   if names is not None and uid not in inv.ports]
        if unknown:
            inv.ports.update(find_ports(unknown))
        budget = self.budget
        for uid, views in sorted(inv.ports.items()):
            if uid not in wanted:
                continue        # not a pod's port, or its pod is gone: swept
            names = wanted[uid]
            target = self.target(names)
            if target is None:
                continue
            for view in views:
                # A port in no group is the port handler's deny-all (a
                # pod whose groups were not made yet): ours to undo.
                if set(view.groups) == set(target) or (
                        names is None and view.groups and
                        not set(view.groups) & ours):
                    continue
                if budget <= 0:
                    self.tally.wait(names or ())
                    continue
                budget -= 1
                self.set(view, target, names or ())
        for uid, names in wanted.items():
            if names is not None and uid not in inv.ports:
                self.tally.wait(names)       # its port is not made yet

    def target(self, names: tuple[str, ...] | None
               ) -> tuple[str, ...] | None:
        """The group ids of the port of a pod ``names`` says the groups
        of (None: no policy selects it: the defaults); None when a group
        it needs is not made yet (it waits)."""
        if names is None:
            return self.inv.defaults
        missing = [n for n in names if n not in self.inv.groups]
        if missing:
            self.tally.wait(names)
            return None
        return tuple(self.inv.groups[n].id for n in names)

    def set(self, view: PortView, target: tuple[str, ...],
            names: Iterable[str]) -> None:
        """One ``PUT``: the port's groups become ``target`` (``names``:
        the groups whose policies a refusal fails)."""
        try:
            view.carries(tuple(self.api.set_port_security_groups(
                view.id, list(target))))
            self.tally.out.writes["port"] += 1
        except sgwire.Missing:
            self.tally.out.again()
        except OpenStackRefused as exc:
            if exc.status == 404:       # the port is gone (its pod too)
                self.tally.out.again()
                return
            LOG.info("Neutron refuses port %s's groups: %s", view.id, exc)
            for name in names:
                self.tally.refused(name, exc)
            if not names:
                self.tally.out.failed.setdefault(EVERY, str(exc)[:400])
