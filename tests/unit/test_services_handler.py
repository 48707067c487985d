"""The services handler in this process (its loop in a thread), against
the Kubernetes API fake and the Octavia fake over real HTTP
(tests/fixtures/servicehandler.py): Services become load balancers, their
endpoints members, in few writes; what Octavia refuses, loses or leaves
in ERROR is told and tried again; a restart writes nothing.

Fake only: faults (a load balancer held pending, one left in ERROR,
Octavia down) are the fake's knobs. The handler against the real Octavia
and its traffic: tests/functional/test_ovn_services.py."""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kuryr_supervisor.controller.openstack.lbwire import Member
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.lbclouds import LbCloud
from tests.fixtures.servicehandler import World, until

VIP = "10.96.0.10"


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    yield fake
    fake.stop()


@pytest.fixture
def world(api: FakeAPI, fake_octavia: LbCloud,
          tmp_path: Path) -> Iterator[World]:
    made = World(api, fake_octavia, tmp_path)
    yield made
    made.stop()


def pod(world: World, n: int) -> str:
    return world.octavia.member(n)


def writes(world: World, since: float = 0.0) -> dict[str, int]:
    """The writes Octavia took since ``since`` (time.time())."""
    fake = world.octavia.fake
    assert fake is not None
    return dict(fake.writes(since))


def test_a_service_becomes_one_load_balancer(world: World) -> None:
    uid = world.service("dns", VIP, ("dns", "UDP", 53), ("dns-tcp", "TCP", 53))
    world.endpoints("dns", pod(world, 1), pod(world, 2),
                    ports={"dns": 5353, "dns-tcp": 5353})
    since = time.time()
    running = world.start()
    world.ready_after(running)
    a, b = Member(pod(world, 1), 5353), Member(pod(world, 2), 5353)
    world.settled(uid, {("TCP", 53): {a, b}, ("UDP", 53): {a, b}})
    lb = world.balancers()[uid]
    assert lb.vip == VIP and lb.description == "default/dns"
    # one write: the whole tree in one POST
    assert writes(world, since) == {"POST /v2/lbaas/loadbalancers": 1}
    [created] = until(lambda: world.events("LoadBalancerCreated"))
    assert created["involvedObject"]["uid"] == uid
    assert created["involvedObject"]["kind"] == "Service"
    assert created["type"] == "Normal"


def test_what_makes_nothing_and_what_is_not_provided(world: World) -> None:
    running = world.start()
    world.ready_after(running)
    world.service("headless", "None", ("web", "TCP", 80))
    world.service("external", "", ("web", "TCP", 80), type="ExternalName",
                  externalName="example.com")
    node = world.service("nodeport", VIP, ("web", "TCP", 80),
                         ("s", "SCTP", 99), type="NodePort")
    world.endpoints("nodeport", pod(world, 1), ports={"web": 8080, "s": 99})
    world.settled(node, {("TCP", 80): {Member(pod(world, 1), 8080)}})
    assert set(world.balancers()) == {node}
    [said] = until(lambda: world.events("NotProvided"))
    assert said["involvedObject"]["uid"] == node
    assert "NodePort" in said["message"] and "SCTP" in said["message"]


def test_members_change_in_one_batch_per_pool(world: World) -> None:
    uid = world.service("web", VIP, ("http", "TCP", 80))
    world.endpoints("web", pod(world, 1), ports={"http": 8080})
    running = world.start()
    world.ready_after(running)
    world.settled(uid, {("TCP", 80): {Member(pod(world, 1), 8080)}})
    since = time.time()
    world.endpoints("web", pod(world, 1), pod(world, 2), pod(world, 3),
                    ports={"http": 8080})
    want = {Member(pod(world, n), 8080) for n in (1, 2, 3)}
    world.settled(uid, {("TCP", 80): want})
    assert writes(world, since) == {"PUT /v2/lbaas/pools/{id}/members": 1}
    # terminating and not-ready endpoints are out
    since = time.time()
    world.endpoints("web", pod(world, 1), pod(world, 2), pod(world, 3),
                    ports={"http": 8080}, conditions={
                        pod(world, 2): {"ready": False},
                        pod(world, 3): {"ready": True, "terminating": True}})
    world.settled(uid, {("TCP", 80): {Member(pod(world, 1), 8080)}})
    assert writes(world, since) == {"PUT /v2/lbaas/pools/{id}/members": 1}


def test_a_busy_load_balancer_gets_the_whole_current_diff(
        world: World) -> None:
    """While the load balancer is pending (another writer's change), the
    endpoints change twice: once it settles, one batch carries the last
    set, never a queue of the calls in between."""
    fake = world.octavia.fake
    assert fake is not None
    uid = world.service("web", VIP, ("http", "TCP", 80))
    world.endpoints("web", pod(world, 1), ports={"http": 8080})
    running = world.start()
    world.ready_after(running)
    world.settled(uid, {("TCP", 80): {Member(pod(world, 1), 8080)}})
    lb = world.balancers()[uid]
    fake.hold = True
    with fake.lock:
        fake.lbs[lb.id]["provisioning_status"] = "PENDING_UPDATE"
        fake._pending[lb.id] = (time.monotonic(), "ACTIVE")
    since = time.time()
    world.endpoints("web", pod(world, 2), ports={"http": 8080})
    time.sleep(0.5)
    world.endpoints("web", pod(world, 3), ports={"http": 8080})
    time.sleep(0.5)
    fake.hold = False
    world.settled(uid, {("TCP", 80): {Member(pod(world, 3), 8080)}})
    assert writes(world, since) == {"PUT /v2/lbaas/pools/{id}/members": 1}
    assert [r[3] for r in fake.refused if r[0] >= since] == [409]


def test_listeners_follow_the_ports(world: World) -> None:
    uid = world.service("web", VIP, ("http", "TCP", 80))
    world.endpoints("web", pod(world, 1), ports={"http": 8080, "dns": 53})
    running = world.start()
    world.ready_after(running)
    world.settled(uid, {("TCP", 80): {Member(pod(world, 1), 8080)}})
    world.service("web", VIP, ("dns", "UDP", 53))
    world.settled(uid, {("UDP", 53): {Member(pod(world, 1), 53)}})
    # listener, pool and members made, the old listener and pool deleted
    lb = world.balancers()[uid]
    assert [p.protocol for p in world.lbs.pools(lb_id=lb.id)] == ["UDP"]
    world.service("web", VIP, ("dns", "UDP", 53), sessionAffinity="ClientIP")
    until(lambda: [p.algorithm for p in world.lbs.pools(lb_id=lb.id)]
          == ["SOURCE_IP"])
    world.settled(uid, {("UDP", 53): {Member(pod(world, 1), 53)}})


def test_a_load_balancer_in_error_is_told_and_made_again(
        world: World) -> None:
    fake = world.octavia.fake
    assert fake is not None
    uid = world.service("web", VIP, ("http", "TCP", 80))
    world.endpoints("web", pod(world, 1), ports={"http": 8080})
    running = world.start()
    world.ready_after(running)
    world.settled(uid, {("TCP", 80): {Member(pod(world, 1), 8080)}})
    first = world.balancers()[uid].id
    fake.force_error(first)
    world.endpoints("web", pod(world, 2), ports={"http": 8080})
    world.settled(uid, {("TCP", 80): {Member(pod(world, 2), 8080)}})
    assert world.balancers()[uid].id != first
    [warned] = until(lambda: world.events("LoadBalancerError"))
    assert warned["type"] == "Warning" and first in warned["message"]
    assert world.state.load_balancers.read()["errors"] == 1


def test_error_again_backs_off_until_the_cause_is_gone(world: World) -> None:
    fake = world.octavia.fake
    assert fake is not None
    uid = world.service("web", VIP, ("http", "TCP", 80))
    world.endpoints("web", pod(world, 1), ports={"http": 8080})
    fake.error_next = True              # the first create fails
    running = world.start()
    until(lambda: world.balancers().get(uid) is not None and
          world.balancers()[uid].status == "ERROR")
    # made again (the cause is gone: the next create works)
    world.settled(uid, {("TCP", 80): {Member(pod(world, 1), 8080)}})
    world.ready_after(running)


def test_a_restart_writes_nothing(world: World) -> None:
    uids = [world.service(f"s{n}", f"10.96.0.{20 + n}", ("http", "TCP", 80))
            for n in range(3)]
    for n in range(3):
        world.endpoints(f"s{n}", pod(world, n), ports={"http": 8080})
    first = world.start()
    world.ready_after(first)
    for n, uid in enumerate(uids):
        world.settled(uid, {("TCP", 80): {Member(pod(world, n), 8080)}})
    first.stop()
    since, k8s_since = time.time(), time.monotonic()
    second = world.start()
    world.ready_after(second)
    time.sleep(1.0)
    assert writes(world, since) == {}
    assert world.k8s_writes(k8s_since) == []
    fake = world.octavia.fake
    assert fake is not None
    reads = fake.counts(since)
    # a look at everything: three lists, and the status tree of each load
    # balancer whose members no one has read yet in this process
    assert reads == {"GET /v2/lbaas/loadbalancers": 1,
                     "GET /v2/lbaas/listeners": 1, "GET /v2/lbaas/pools": 1,
                     "GET /v2/lbaas/loadbalancers/{id}/status": 3}


def test_a_service_deleted_meanwhile_is_swept(world: World) -> None:
    keep = world.service("keep", "10.96.0.30", ("http", "TCP", 80))
    gone = world.service("gone", "10.96.0.31", ("http", "TCP", 80))
    first = world.start()
    world.ready_after(first)
    world.settled(keep, {("TCP", 80): set()})
    world.settled(gone, {("TCP", 80): set()})
    first.stop()
    world.api.delete_service("default", "gone")
    second = world.start()
    until(lambda: set(world.balancers()) == {keep})
    world.ready_after(second)
    # deleted while running: gone at once, the VIP free for another
    world.api.delete_service("default", "keep")
    again = world.service("again", "10.96.0.30", ("http", "TCP", 80))
    until(lambda: set(world.balancers()) == {again})


def test_a_load_balancer_is_never_swept_on_a_list_alone(
        world: World, api: FakeAPI) -> None:
    """A load balancer whose Service a lagging list lacks is kept: the
    Service is read before anything is deleted."""
    uid = world.service("web", VIP, ("http", "TCP", 80))
    first = world.start()
    world.ready_after(first)
    world.settled(uid, {("TCP", 80): set()})
    first.stop()
    api.unlisted.add(("default", "web"))
    since = time.time()
    second = world.start()
    world.ready_after(second)
    time.sleep(1.0)
    assert uid in world.balancers()
    assert writes(world, since) == {}


def test_octavia_down_then_back(world: World) -> None:
    fake = world.octavia.fake
    assert fake is not None
    running = world.start()
    world.ready_after(running)
    fake.down()
    uid = world.service("web", VIP, ("http", "TCP", 80))
    world.endpoints("web", pod(world, 1), ports={"http": 8080})
    time.sleep(1.5)
    beats = list(running.beats)
    assert beats and max(b - a for a, b in zip(beats, beats[1:],
                                                strict=False)) < 1.0
    fake.up()
    world.settled(uid, {("TCP", 80): {Member(pod(world, 1), 8080)}},
                  timeout=30)


def test_a_hung_octavia_never_stops_the_beat(world: World) -> None:
    fake = world.octavia.fake
    assert fake is not None
    world.conf.set_override("openstack_timeout", 0.5, "controller")
    running = world.start()
    world.ready_after(running)
    fake.hang = 30.0
    world.service("web", VIP, ("http", "TCP", 80))
    start = time.monotonic()
    time.sleep(3.0)
    beats = [b for b in running.beats if b >= start]
    gaps = [b - a for a, b in zip(beats, beats[1:], strict=False)]
    assert gaps and max(gaps) < 1.0, gaps
    fake.hang = 0.0


def test_the_kubernetes_service_and_endpoints_in_no_subnet(
        world: World) -> None:
    """The API servers' endpoints are no pods: their subnet (the nodes')
    is found among those Neutron shows; an endpoint in none is left out
    and said."""
    cloud = world.octavia.cloud
    nodes = {"id": "nodes-subnet", "network_id": "nodes",
             "cidr": "192.168.50.0/24", "gateway_ip": "192.168.50.1",
             "ip_version": 4}
    cloud.neutron.more_subnets.append(nodes)
    fake = world.octavia.fake
    assert fake is not None
    fake.subnets["nodes-subnet"] = "192.168.50.0/24"
    uid = world.service("kubernetes", "10.96.0.1", ("https", "TCP", 443))
    world.endpoints("kubernetes", "192.168.50.10", "172.31.0.9",
                    ports={"https": 6443}, slice_name="kubernetes")
    running = world.start()
    world.ready_after(running)
    world.settled(uid, {("TCP", 443): {Member("192.168.50.10", 6443)}})
    member = next(m for m in fake.members.values()
                  if m["address"] == "192.168.50.10")
    assert member["subnet_id"] == "nodes-subnet"
    [left] = world.events("EndpointsLeftOut")
    assert "172.31.0.9" in left["message"] and left["type"] == "Warning"


def test_a_vip_held_by_someone_else_is_refused_and_told(
        world: World) -> None:
    other = world.lbs.create_load_balancer(
        name="someone-else", description="", vip_address=VIP,
        vip_subnet_id=world.octavia.service_subnet_id, tags=[],
        provider="ovn", listeners=[])
    uid = world.service("web", VIP, ("http", "TCP", 80))
    running = world.start()
    world.ready_after(running)
    until(lambda: world.events("LoadBalancerRefused"))
    [refused] = world.events("LoadBalancerRefused")
    assert other.id in refused["message"] and refused["type"] == "Warning"
    assert uid not in world.balancers()
    assert world.state.load_balancers.read()["refusals"] >= 1


def test_a_service_deleted_while_watched_goes_at_once(
        api: FakeAPI, fake_octavia: LbCloud, tmp_path: Path) -> None:
    """The watch saw it go: its load balancer is deleted at once, not at
    the next full look (a minute away here)."""
    world = World(api, fake_octavia, tmp_path, resync_interval=60.0)
    try:
        uid = world.service("web", VIP, ("http", "TCP", 80))
        running = world.start()
        world.ready_after(running)
        world.settled(uid, {("TCP", 80): set()})
        api.delete_service("default", "web")
        until(lambda: uid not in world.balancers(), timeout=5.0)
        # and the next Service with that VIP gets it
        again = world.service("again", VIP, ("http", "TCP", 80))
        world.settled(again, {("TCP", 80): set()}, timeout=5.0)
    finally:
        world.stop()
