"""Port pools in the neutron_port handler, in this process, against the
Kubernetes API fake and a Neutron fake that updates ports, over real HTTP:
a pod takes a pool port of its node's pool with one update; the pool
refills in batches up to its low-water mark, never past its high-water
mark or the quota (less a port per node); the sweep and a restart keep
pool ports; a smaller or disabled pool gives its ports back. Per-node pools: tests/unit/
test_portpool_nodes.py.

Pools are per node and made on first demand: each test's node (``node-a``)
runs a resident pod when the handler lists, so its pool is filled at once
(the resident pod gets a port made, before the pools start)."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kuryr_supervisor.controller.ports.handler import NeutronPortHandler
from kuryr_supervisor.state.poolstats import PoolBoard
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.openstack import FakeKeystone
from tests.fixtures.poolcloud import PooledNeutron
from tests.unit.test_neutronport import Counts, World, arrive
from tests.unit.test_openstack import neutron_conf


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    api = FakeAPI().start()
    keystone = FakeKeystone().start()
    neutron = PooledNeutron(keystone).start()
    conf = neutron_conf(tmp_path, keystone, pod_network_id=neutron.network_id,
                        pod_subnet_id=neutron.subnet["id"])
    for key, value in (("enabled", True), ("ports_pool_min", 20),
                       ("ports_pool_max", 30), ("ports_pool_batch", 10),
                       ("ports_pool_update_frequency", 0.2)):
        conf.set_override(key, value, "vif_pool")
    world = World(api, neutron, conf, Counts())
    yield world
    world.stop_handlers()
    neutron.stop()
    keystone.stop()
    api.stop()


@pytest.fixture
def stopping() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def wait_for(what: Callable[[], bool], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def resident(world: World, *nodes: str) -> None:
    """A pod on each node (once): the list gives the node its pool."""
    for node in nodes:
        if ("ns", f"resident-{node}") not in world.api.pods:
            world.api.add_pod("ns", f"resident-{node}", node)


def running(world: World, stopping: threading.Event,
            nodes: tuple[str, ...] = ("node-a",)) -> NeutronPortHandler:
    """A handler listed, its refill thread started (as ``run`` does; the
    pools serve from the start, so the resident pods listed before the
    first refill count a miss each)."""
    resident(world, *nodes)
    handler = world.handler()
    handler.pools.board = PoolBoard()
    world.start(handler)
    handler.refill.start(stopping)
    return handler


def free(handler: NeutronPortHandler, node: str = "node-a") -> int:
    return len(handler.pools.of(node).free)


def posts(world: World) -> int:
    return world.neutron.counts()["POST /v2.0/ports"]


def test_pods_take_pool_ports_and_the_pool_refills(
        world: World, stopping: threading.Event) -> None:
    neutron = world.neutron
    assert isinstance(neutron, PooledNeutron)
    handler = running(world, stopping)
    wait_for(lambda: free(handler) == 20)
    assert neutron.bulk_sizes == [1, 10, 10]         # resident; batches of 10
    pool_ids = {p["id"] for p in neutron.pool_ports()}
    assert all("kuryr-supervisor-pool" in p["tags"] for p in neutron.pool_ports())
    before = posts(world)
    pods = world.add(15)
    arrive(handler, pods)
    assert len(world.api.podports) == 1 + 15          # at once
    wait_for(lambda: world.ported(pods))              # updates applied
    assert neutron.updates == 15
    taken = {neutron.ports_for(p["metadata"]["uid"])[0]["id"] for p in pods}
    assert taken <= pool_ids                          # each a pool port
    assert posts(world) - before <= 2                 # refills only
    wait_for(lambda: free(handler) >= 20 and
             handler.pools.of("node-a").creating == 0)  # refilled
    time.sleep(0.3)
    assert free(handler) == 25                        # 5 left + 2 batches
    assert len(neutron.pool_ports()) == 25
    assert len(neutron.ports) == 41                   # 16 pods + 25 free
    handler.pools.publish()
    row = handler.pools.board.rows()[0] if handler.pools.board else {}
    # The one miss: the resident pod, listed before the pool was filled.
    assert (row["node"], row["hits"], row["misses"], row["free"], row["low"],
            row["high"]) == ("node-a", 15, 1, 25, 20, 30), row


def test_empty_pool_misses_and_creates(world: World,
                                       stopping: threading.Event) -> None:
    """Pods faster than the pool: the ones that find it empty get a port
    made for them as without a pool; each pod still has exactly one."""
    world.conf.set_override("ports_pool_min", 5, "vif_pool")
    world.conf.set_override("ports_pool_max", 5, "vif_pool")
    handler = running(world, stopping)
    wait_for(lambda: free(handler) == 5)
    pods = world.add(12)
    arrive(handler, pods)
    wait_for(lambda: world.ported(pods))
    pool = handler.pools.of("node-a")
    assert (pool.hits, pool.misses) == (5, 1 + 7)     # the resident's too
    wait_for(lambda: free(handler) == 5)              # refilled, to max


def test_restart_and_sweep_keep_pool_ports(
        world: World, stopping: threading.Event) -> None:
    handler = running(world, stopping)
    wait_for(lambda: free(handler) == 20)
    handler.resync(set())                             # sweep: nothing to delete
    assert len(world.neutron.pool_ports()) == 20
    before = posts(world)
    again = running(world, stopping)                  # a restart
    wait_for(lambda: free(again) == 20)
    time.sleep(0.5)
    assert posts(world) == before                     # re-adopted, not made
    assert world.neutron.counts()["DELETE /v2.0/ports/{id}"] == 0


def test_smaller_or_disabled_pool_gives_ports_back(
        world: World, stopping: threading.Event) -> None:
    handler = running(world, stopping)
    wait_for(lambda: free(handler) == 20)
    world.conf.set_override("ports_pool_min", 5, "vif_pool")
    world.conf.set_override("ports_pool_max", 8, "vif_pool")
    handler.pools.wake.set()
    wait_for(lambda: len(world.neutron.pool_ports()) == 8)
    assert free(handler) == 8
    world.conf.set_override("enabled", False, "vif_pool")
    handler.pools.wake.set()
    wait_for(lambda: world.neutron.pool_ports() == [])
    wait_for(lambda: handler.pools.of("node-a").given_back == 20)
    assert free(handler) == 0
    pods = world.add(3)
    arrive(handler, pods)                             # off: created as ever
    assert world.ported(pods) and world.neutron.updates == 0


def test_refill_stays_within_the_quota(world: World,
                                       stopping: threading.Event) -> None:
    """Within the quota, less a port for a miss on the node."""
    world.neutron.port_limit = 13
    handler = running(world, stopping)
    wait_for(lambda: free(handler) == 11)             # 13 - resident's - 1
    time.sleep(0.5)
    assert len(world.neutron.ports) == 12
    assert world.neutron.bulk_sizes == [1, 10, 1]


def test_a_vanished_pool_port_is_replaced(
        world: World, stopping: threading.Event) -> None:
    """A pool port deleted behind the pool's back is handed out before
    anyone knows: the pod's PodPort names it, its update finds it gone,
    and the next resync gives the pod (not bound yet) a port again and
    its PodPort names that one."""
    world.conf.set_override("ports_pool_min", 1, "vif_pool")
    world.conf.set_override("ports_pool_max", 1, "vif_pool")
    handler = running(world, stopping)
    wait_for(lambda: free(handler) == 1)
    gone = next(iter(handler.pools.of("node-a").free.values()))
    handler.cloud.delete_port(gone.id)          # deleted by hand
    pods = world.add(1)
    arrive(handler, pods)
    spec = world.api.podports[("ns", "p0")]["spec"]
    assert spec["portId"] == gone.id
    wait_for(lambda: len(handler.pools.claims) == 0)  # the update: 404
    handler.resync(set(handler.book.pods))
    wait_for(lambda: world.ported(pods))
    assert world.api.podports[("ns", "p0")]["spec"]["portId"] != gone.id


def test_a_slow_update_holds_no_pod_and_survives_a_restart(
        world: World, stopping: threading.Event) -> None:
    """Neutron takes its time to update the claimed port: the pod's
    PodPort is written at once; a restart before the update is applied
    finds the pod's port through its PodPort (no second port, the port not
    put back in the pool), and the update is applied in the end."""
    neutron = world.neutron
    assert isinstance(neutron, PooledNeutron)
    world.conf.set_override("ports_pool_min", 2, "vif_pool")
    world.conf.set_override("ports_pool_max", 2, "vif_pool")
    handler = running(world, stopping)
    wait_for(lambda: free(handler) == 2)
    pool_ids = set(handler.pools.of("node-a").free)
    neutron.update_delay = 1.5
    pods = world.add(1)
    started = time.monotonic()
    arrive(handler, pods)
    assert time.monotonic() - started < 1.0           # did not wait
    spec = world.api.podports[("ns", "p0")]["spec"]
    assert spec["portId"] in pool_ids
    again = running(world, stopping)                  # restart meanwhile
    assert spec["portId"] not in again.pools.of("node-a").free
    assert again.book.pods[pods[0]["metadata"]["uid"]].port_id == \
        spec["portId"]
    wait_for(lambda: world.ported(pods))
    assert neutron.counts()["DELETE /v2.0/ports/{id}"] == 0
    # Every other port is a pool port: none was made for the pod.
    assert len(neutron.ports) == len(neutron.pool_ports()) + 2  # + resident


def test_disabled_pool_makes_and_shows_nothing(
        world: World, stopping: threading.Event) -> None:
    world.conf.set_override("enabled", False, "vif_pool")
    handler = running(world, stopping)
    pods = world.add(2)
    arrive(handler, pods)
    time.sleep(0.5)
    assert world.ported(pods) and world.neutron.updates == 0
    assert world.neutron.bulk_sizes == [1, 2]         # the pods' own creates
    assert handler.pools.board is not None and handler.pools.board.rows() == []


def test_a_pool_port_listed_before_its_batch_is_answered_goes_to_one_pod(
        world: World, stopping: threading.Event) -> None:
    """Neutron lists a bulk create's ports before it answers (a real one
    binds them one by one first): a resync in between leaves them to the
    answer. Kept from that list, one was handed to a pod, then put back as
    free by the answer, for a second pod to take."""
    for key, value in (("ports_pool_min", 5), ("ports_pool_max", 5),
                       ("ports_pool_batch", 5)):
        world.conf.set_override(key, value, "vif_pool")
    world.neutron.create_delay = 0.8            # made, answered 0.8 s later
    handler = running(world, stopping)
    wait_for(lambda: len(world.neutron.pool_ports()) == 5)
    assert handler.pools.of("node-a").creating == 5     # not answered yet
    handler.resync(set())                       # lists them
    first = world.add(1, "first")
    arrive(handler, first)
    wait_for(lambda: handler.pools.of("node-a").creating == 0)   # answered
    wait_for(lambda: world.ported(first))
    held = world.api.podports[("ns", "first0")]["spec"]["portId"]
    assert held not in handler.pools.of("node-a").free
    second = world.add(5, "second")
    arrive(handler, second)
    wait_for(lambda: world.ported(first + second))
    named = [world.api.podports[("ns", p["metadata"]["name"])]["spec"][
        "portId"] for p in first + second]
    assert len(set(named)) == len(named), named     # one pod per port


def test_a_lost_refill_answer_is_adopted_not_made_again(
        world: World, stopping: threading.Event) -> None:
    """Neutron makes a refill's ports but its answer is lost (500): the
    pool finds them at its next turn; nothing is made twice or deleted."""
    world.conf.set_override("ports_pool_min", 10, "vif_pool")
    world.conf.set_override("ports_pool_max", 10, "vif_pool")
    world.neutron.lose_bulk_answers = 1
    handler = running(world, stopping)
    wait_for(lambda: free(handler) == 10)
    time.sleep(0.5)
    assert world.neutron.bulk_sizes == [1, 10]
    assert len(world.neutron.pool_ports()) == 10
    assert world.neutron.counts()["DELETE /v2.0/ports/{id}"] == 0
