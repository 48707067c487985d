"""How one pool's members are written: one write either way, the member
added or deleted alone when that is the pool's one difference and
others stay, else the batch (:mod:`.work` runs it, one per job).

The OVN provider handles a batch replace as its additions, then an
update of every member kept (one more request, with a status round trip
to Octavia as long as the change's own), then its deletions, and the
load balancer settles only after all. A member's own create or delete
touches no other member: a deletion is handled at once, and either
settles a request sooner (the next pool's write, a Service's UDP pool
after its TCP one, with it). A batch is still the write for any other
difference (never a call per member).

A member deleted alone is named by its id, as the last status tree said
it (read then if none did since the pool's last write: a tree read just
after a write may still show a member that write deleted); if it is
gone meanwhile, the batch is written instead.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

from kuryr_supervisor.controller.openstack import lbwire
from kuryr_supervisor.controller.openstack.lbwire import Member
from kuryr_supervisor.controller.openstack.octavia import MemberSpec, OctaviaApi
from kuryr_supervisor.controller.services.desired import Listener


class MemberWrites:
    """One job's member writes (see the module): ``subnet_of`` a member's
    subnet."""

    def __init__(self, api: OctaviaApi,
                 subnet_of: Callable[[str], str]) -> None:
        self.api, self.subnet_of = api, subnet_of
        #: Each pool's member ids by member, as the last tree said them.
        self.ids_of: dict[str, Mapping[Member, str]] = {}

    def write(self, lb_id: str, pool_id: str, have: frozenset[Member],
              listener: Listener, tags: list[str]) -> None:
        """Pool ``pool_id`` (of load balancer ``lb_id``), whose members
        are ``have``, gets ``listener``'s: one write."""
        want = listener.members
        added, gone = want - have, have - want
        try:
            if have & want and len(added) + len(gone) == 1:
                if added:
                    [member] = added
                    self.api.add_member(pool_id, self.spec(member), tags)
                    return
                [member] = gone
                member_id = self._id(lb_id, pool_id, member)
                if member_id and self.api.delete_member(pool_id, member_id):
                    return
            self.api.replace_members(pool_id, self.specs(listener), tags)
        finally:
            self.ids_of.pop(pool_id, None)

    def saw(self, tree: lbwire.Tree) -> None:
        """A status tree read: the member ids it says."""
        self.ids_of.update(tree.ids_of)

    def spec(self, m: Member) -> MemberSpec:
        return MemberSpec(m.address, m.port, self.subnet_of(m.address))

    def specs(self, listener: Listener) -> tuple[MemberSpec, ...]:
        return tuple(self.spec(m) for m in sorted(listener.members))

    def _id(self, lb_id: str, pool_id: str, member: Member) -> str:
        """The member's id, as the last status tree said it (read now if
        none did); "" if none says it."""
        if pool_id not in self.ids_of:
            tree = self.api.tree(lb_id)
            if tree is not None:
                self.saw(tree)
        return self.ids_of.get(pool_id, {}).get(member, "")
