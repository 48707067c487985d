"""The Octavia contract: what the services handler relies on Octavia (with
the OVN provider) doing, through the adapter's own calls
(kuryr_supervisor/controller/openstack/octavia.py), checked against the
fake (``[fake]``) and the real Octavia on the OVN stack (``[real]``)
alike (tests/fixtures/lbclouds.py). Whatever the real one does here, the
fake must do too: a failure of ``[fake]`` alone is a bug in
tests/fixtures/octavia.py.

- a load balancer made whole in one POST (listeners, default pools,
  members), every object tagged, is found by one tag-filtered list of
  each kind, and by its VIP; its members are in its status tree;
- a write on a load balancer that is not ACTIVE is refused (409: busy),
  and it is ACTIVE again soon after each write;
- a batch replace of a pool's members keeps those of the same address
  and port (same ids), adds and deletes the rest (a deleted member is
  listed, ACTIVE, for a while after the rest settled);
- one member's own create and delete (the others untouched, their ids
  kept): each one write, refused while pending; the status tree names
  each member's id; a member already deleted is gone (404);
- a listener is made, then its default pool, then the pool's members
  (each one write: only a load balancer's create takes a tree); a pool
  is deleted and made again for its listener; a listener is deleted;
- a second load balancer on a VIP in use is refused (VIP in use);
- a cascade delete leaves nothing listed, the load balancer gone.

Every load balancer a test makes carries the test's tag and is deleted at
its end, failed or not (the real Octavia is shared by the session).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from kuryr_supervisor.controller.openstack import lbwire
from kuryr_supervisor.controller.openstack.lbwire import Member
from kuryr_supervisor.controller.openstack.octavia import (
    ListenerSpec,
    MemberSpec,
    Octavia,
)
from tests.fixtures.daemon import wait_until as wait_for
from tests.fixtures.lbclouds import LbCloud, wait_active

SERVICES = "kuryr-supervisor:services"


@pytest.fixture
def octavia(any_octavia: LbCloud, tmp_path: Path) -> Iterator[Octavia]:
    api = any_octavia.api(tmp_path)
    yield api
    any_octavia.clean(api)


def members(cloud: LbCloud, *ns: int, port: int = 8080) -> tuple[MemberSpec, ...]:
    return tuple(MemberSpec(cloud.member(n), port, cloud.pod_subnet_id)
                 for n in ns)


def make(cloud: LbCloud, api: Octavia, *listeners: ListenerSpec,
         vip: str = "") -> lbwire.LoadBalancer:
    return api.create_load_balancer(
        name=f"{cloud.tag}:lb", description="ns/svc",
        vip_address=vip or cloud.vip(),
        vip_subnet_id=cloud.service_subnet_id, tags=[cloud.tag, SERVICES],
        provider="ovn", listeners=listeners)


def test_whole_create_found_by_tags_and_vip(any_octavia: LbCloud,
                                            octavia: Octavia) -> None:
    cloud = any_octavia
    tcp = ListenerSpec("TCP", 80, "SOURCE_IP_PORT", members(cloud, 1, 2))
    udp = ListenerSpec("UDP", 80, "SOURCE_IP", members(cloud, 1, port=5353))
    vip = cloud.vip()
    lb = make(cloud, octavia, tcp, udp, vip=vip)
    assert lb.vip == vip and lb.status in ("PENDING_CREATE", "ACTIVE")
    assert set(lb.tags) == {cloud.tag, SERVICES}
    assert lb.description == "ns/svc" and lb.name == f"{cloud.tag}:lb"
    assert wait_active(octavia, lb.id) == "ACTIVE"

    tags = [cloud.tag, SERVICES]
    assert [x.id for x in octavia.load_balancers(tags=tags)] == [lb.id]
    assert [x.id for x in octavia.load_balancers(vip_address=vip)] == [lb.id]
    assert octavia.load_balancers(tags=[cloud.tag, "another"]) == []
    listeners = {(li.protocol, li.port): li
                 for li in octavia.listeners(tags=tags)}
    assert set(listeners) == {("TCP", 80), ("UDP", 80)}
    assert all(li.lb_id == lb.id and li.default_pool_id
               for li in listeners.values())
    pools = {p.id: p for p in octavia.pools(tags=tags)}
    assert set(pools) == {li.default_pool_id for li in listeners.values()}
    tcp_pool = pools[listeners["TCP", 80].default_pool_id]
    udp_pool = pools[listeners["UDP", 80].default_pool_id]
    assert (tcp_pool.protocol, tcp_pool.algorithm) == ("TCP", "SOURCE_IP_PORT")
    assert (udp_pool.protocol, udp_pool.algorithm) == ("UDP", "SOURCE_IP")
    assert [p.id for p in octavia.pools(lb_id=lb.id)] != []
    assert {li.id for li in octavia.listeners(lb_id=lb.id)} == \
        {li.id for li in listeners.values()}

    tree = octavia.tree(lb.id)
    assert tree is not None and tree.status == "ACTIVE"
    assert tree.members[tcp_pool.id] == {Member(cloud.member(1), 8080),
                                         Member(cloud.member(2), 8080)}
    assert tree.members[udp_pool.id] == {Member(cloud.member(1), 5353)}
    assert tree.member_ids[tcp_pool.id] == tcp_pool.member_ids


def test_busy_while_pending_and_batch_replace(any_octavia: LbCloud,
                                              octavia: Octavia) -> None:
    cloud = any_octavia
    lb = make(cloud, octavia, ListenerSpec(
        "TCP", 80, "SOURCE_IP_PORT", members(cloud, 1, 2)))
    [pool] = octavia.pools(tags=[cloud.tag])
    if lb.status != "ACTIVE":
        with pytest.raises(lbwire.LoadBalancerBusy):
            octavia.replace_members(pool.id, members(cloud, 1), [cloud.tag])
    assert wait_active(octavia, lb.id) == "ACTIVE"
    before = octavia.tree(lb.id)
    assert before is not None
    kept = {m for m in before.member_ids[pool.id]}

    octavia.replace_members(pool.id, members(cloud, 2, 3), [cloud.tag])
    with pytest.raises(lbwire.LoadBalancerBusy):
        octavia.replace_members(pool.id, members(cloud, 4), [cloud.tag])
    assert wait_active(octavia, lb.id) == "ACTIVE"
    # The deleted member is still listed (ACTIVE) once the rest settled:
    # its deletion is reported last, about a second later.
    want = {Member(cloud.member(2), 8080), Member(cloud.member(3), 8080)}
    after = wait_for(lambda: (t := octavia.tree(lb.id)) is not None
                     and t.members[pool.id] == want and t, 30)
    # member 2 kept its id; 1 went, 3 came
    assert len(after.member_ids[pool.id] & kept) == 1
    [listed] = octavia.pools(tags=[cloud.tag])
    assert listed.member_ids == after.member_ids[pool.id]


def test_listener_and_pool_made_and_deleted(any_octavia: LbCloud,
                                            octavia: Octavia) -> None:
    cloud = any_octavia
    tags = [cloud.tag, SERVICES]
    lb = make(cloud, octavia)
    assert wait_active(octavia, lb.id) == "ACTIVE"
    spec = ListenerSpec("TCP", 443, "SOURCE_IP_PORT", members(cloud, 1))
    li = octavia.create_listener(lb.id, spec, tags)
    assert (li.protocol, li.port, li.lb_id) == ("TCP", 443, lb.id)
    assert li.default_pool_id == ""
    assert wait_active(octavia, lb.id) == "ACTIVE"
    pool = octavia.create_pool(li.id, spec, tags)
    assert wait_active(octavia, lb.id) == "ACTIVE"
    assert [p.id for p in octavia.pools(tags=tags)] == [pool.id]
    assert octavia.pools(tags=tags)[0].member_ids == frozenset()
    [listed] = octavia.listeners(tags=tags)
    assert listed.default_pool_id == pool.id

    assert octavia.delete_pool(pool.id)
    assert wait_active(octavia, lb.id) == "ACTIVE"
    assert octavia.pools(tags=tags) == []
    [bare] = octavia.listeners(tags=tags)
    assert bare.default_pool_id == ""

    again = ListenerSpec("TCP", 443, "SOURCE_IP", members(cloud, 2))
    made = octavia.create_pool(li.id, again, tags)
    assert made.algorithm == "SOURCE_IP"
    assert wait_active(octavia, lb.id) == "ACTIVE"
    [listed] = octavia.listeners(tags=tags)
    assert listed.default_pool_id == made.id
    octavia.replace_members(made.id, again.members, tags)
    assert wait_active(octavia, lb.id) == "ACTIVE"
    tree = octavia.tree(lb.id)
    assert tree is not None
    assert tree.members[made.id] == {Member(cloud.member(2), 8080)}

    assert octavia.delete_listener(li.id)
    assert wait_active(octavia, lb.id) == "ACTIVE"
    assert octavia.listeners(tags=tags) == []


def test_vip_in_use_and_cascade_delete(any_octavia: LbCloud,
                                       octavia: Octavia) -> None:
    cloud = any_octavia
    vip = cloud.vip()
    lb = make(cloud, octavia, ListenerSpec(
        "UDP", 53, "SOURCE_IP_PORT", members(cloud, 1, port=53)), vip=vip)
    assert wait_active(octavia, lb.id) == "ACTIVE"
    # The provider logs Neutron's refusal of the VIP port as an ERROR.
    cloud.expect_error(rf"IP address {re.escape(vip)} already allocated")
    with pytest.raises(lbwire.VipInUse):
        make(cloud, octavia, vip=vip)

    assert octavia.delete_load_balancer(lb.id)
    assert wait_active(octavia, lb.id) == "GONE"
    assert octavia.load_balancer(lb.id) is None
    assert octavia.tree(lb.id) is None
    assert octavia.load_balancers(tags=[cloud.tag]) == []
    assert octavia.listeners(tags=[cloud.tag]) == []
    assert octavia.pools(tags=[cloud.tag]) == []
    assert octavia.delete_load_balancer(lb.id) is False
    # the VIP is free again
    again = make(cloud, octavia, vip=vip)
    assert wait_active(octavia, again.id) == "ACTIVE"


def test_one_member_created_and_deleted_alone(any_octavia: LbCloud,
                                              octavia: Octavia) -> None:
    cloud = any_octavia
    lb = make(cloud, octavia, ListenerSpec(
        "TCP", 80, "SOURCE_IP_PORT", members(cloud, 1, 2)))
    [pool] = octavia.pools(tags=[cloud.tag])
    assert wait_active(octavia, lb.id) == "ACTIVE"
    before = octavia.tree(lb.id)
    assert before is not None
    one, two, three = (Member(cloud.member(n), 8080) for n in (1, 2, 3))
    assert set(before.ids_of[pool.id]) == {one, two}
    assert set(before.ids_of[pool.id].values()) == before.member_ids[pool.id]

    [spec] = members(cloud, 3)
    octavia.add_member(pool.id, spec, [cloud.tag])
    with pytest.raises(lbwire.LoadBalancerBusy):
        octavia.add_member(pool.id, members(cloud, 4)[0], [cloud.tag])
    assert wait_active(octavia, lb.id) == "ACTIVE"
    added = wait_for(lambda: (t := octavia.tree(lb.id)) is not None
                     and t.members[pool.id] == {one, two, three} and t, 30)
    kept = {m: before.ids_of[pool.id][m] for m in (one, two)}
    assert {m: added.ids_of[pool.id][m] for m in (one, two)} == kept

    assert octavia.delete_member(pool.id, kept[one])
    assert wait_active(octavia, lb.id) == "ACTIVE"
    after = wait_for(lambda: (t := octavia.tree(lb.id)) is not None
                     and t.members[pool.id] == {two, three}
                     and len(t.member_ids[pool.id]) == 2 and t, 30)
    assert after.ids_of[pool.id][two] == kept[two]
    assert not octavia.delete_member(pool.id, kept[one])
