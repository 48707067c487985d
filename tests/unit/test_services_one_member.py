"""A pool's one difference, a member added or one deleted while others
stay, is that member's own create or delete (one write, as the batch,
but the OVN provider then touches no member kept: the change is handled
first and the load balancer settles sooner); any other difference is the
pool's batch. The services handler in this process, against the
Kubernetes API fake and the Octavia fake over real HTTP
(tests/fixtures/servicehandler.py)."""
from __future__ import annotations

from kuryr_supervisor.controller.openstack.lbwire import Member
from tests.fixtures.servicehandler import World
from tests.unit import test_services_handler as handler_tests

VIP = "10.96.0.12"
BATCH = "PUT /v2/lbaas/pools/{id}/members"
ADD = "POST /v2/lbaas/pools/{id}/members"
DELETE = "DELETE /v2/lbaas/pools/{id}/members/{id}"

#: The handler tests' fixtures: the API fake, the handler over it.
api, world = handler_tests.api, handler_tests.world


def test_one_member_added_or_deleted_is_its_own_write(world: World) -> None:
    fake = world.octavia.fake
    assert fake is not None
    one, two, three = (world.octavia.member(n) for n in (1, 2, 3))
    uid = world.service("dns", VIP, ("dns", "UDP", 53), ("dns-tcp", "TCP", 53))
    ports = {"dns": 5353, "dns-tcp": 5353}
    world.endpoints("dns", one, two, ports=ports)
    running = world.start()
    world.ready_after(running)

    def both(*addresses: str) -> dict[tuple[str, int], set[Member]]:
        members = {Member(a, 5353) for a in addresses}
        return {("TCP", 53): members, ("UDP", 53): members}
    world.settled(uid, both(one, two))
    steps = [((one,), {DELETE: 2}),            # one deleted, one kept
             ((one, three), {ADD: 2}),         # one added, one kept
             ((two, three), {BATCH: 2}),       # one replaced: the batch
             ((one, two, three), {ADD: 2}),
             ((one,), {BATCH: 2}),             # two deleted: the batch
             ((), {BATCH: 2}),                 # the last: the batch
             ((two,), {BATCH: 2})]             # into none: the batch
    for addresses, wrote in steps:
        since = fake.accepted[-1][0] + 1e-6
        world.endpoints("dns", *addresses, ports=ports)
        world.settled(uid, both(*addresses))
        assert dict(fake.writes(since)) == wrote, addresses
    assert fake.refused == []
    # A restart writes nothing: the members are as Octavia has them.
    running.stop()
    since = fake.accepted[-1][0] + 1e-6
    world.ready_after(world.start())
    world.settled(uid, both(two))
    assert dict(fake.writes(since)) == {}
