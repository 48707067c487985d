"""What a pass of the network_policy handler did and left (:class:`Result`),
and whose it is: each object's failure or wait told against the policies
that need it (:func:`owners`), the handler's own groups against every
policy (:data:`EVERY`)."""
from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Iterable

from kuryr_supervisor.controller.openstack.wire import OpenStackRefused
from kuryr_supervisor.controller.policy.desired import Desired
from kuryr_supervisor.controller.policy.naming import Naming

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

    def again(self) -> None:
        """Something vanished behind the pass's back: the next pass
        starts with a full look."""
        self.look_again = True


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



class Tally:
    """The :class:`Result` of a pass as its steps fill it."""

    def __init__(self, owners: dict[str, set[str]]) -> None:
        self.owners = owners
        self.out = Result()

    def refused(self, name: str, exc: OpenStackRefused) -> None:
        """Neutron refused a change of ``name``: its policies failed."""
        LOG.info("Neutron refuses a change of %s: %s", name, exc)
        for uid in self.owners.get(name, {EVERY}):
            self.out.failed.setdefault(uid, str(exc)[:400])

    def wait(self, names: Iterable[str]) -> None:
        """What needs ``names`` waits."""
        for name in names:
            self.out.pending |= self.owners.get(name, {EVERY})
