"""Port pools per node, in the neutron_port handler against the
Kubernetes API fake and a Neutron fake over real HTTP: each node that runs
pods gets its own pool of ports already bound to it; a pod takes a port of
its own node's pool with no rebinding; a pod on a node without a pool is a
miss, gets a port made as ever, and starts that node's pool; the quota
bounds all pools together; a restart re-adopts each port into its node's
pool; a node left without pods gives its pool back; a controller that may
not set ``binding:host_id`` keeps one unbound pool."""
from __future__ import annotations

import threading
import time
from typing import Any

from kuryr_supervisor.controller.ports.handler import NeutronPortHandler
from kuryr_supervisor.kubernetes.clusterpods import cluster_pod
from tests.fixtures.poolcloud import PooledNeutron
from tests.unit import test_portpool as base
from tests.unit.test_neutronport import World, arrive
from tests.unit.test_portpool import free, running, wait_for

#: The fixtures of the pool tests.
world, stopping = base.world, base.stopping

SMALL = {"ports_pool_min": 4, "ports_pool_max": 6, "ports_pool_batch": 4}


def small(world: World, **more: object) -> None:
    for key, value in {**SMALL, **more}.items():
        world.conf.set_override(key, value, "vif_pool")


def hosts(world: World) -> dict[str, str]:
    """Free pool port id -> its binding:host_id, as Neutron holds it."""
    neutron = world.neutron
    assert isinstance(neutron, PooledNeutron)
    return {p["id"]: p.get("binding:host_id", "")
            for p in neutron.pool_ports()}


def on(world: World, node: str, count: int,
       prefix: str) -> list[dict[str, Any]]:
    return [world.api.add_pod("ns", f"{prefix}{i}", node)
            for i in range(count)]


def filled(handler: NeutronPortHandler, *nodes: str, count: int = 4) -> None:
    wait_for(lambda: all(free(handler, n) == count for n in nodes))


def test_each_node_gets_a_pool_of_ports_bound_to_it(
        world: World, stopping: threading.Event) -> None:
    small(world)
    neutron = world.neutron
    assert isinstance(neutron, PooledNeutron)
    handler = running(world, stopping, ("node-a", "node-b"))
    filled(handler, "node-a", "node-b")
    bound = hosts(world)
    assert sorted(bound.values()) == ["node-a"] * 4 + ["node-b"] * 4
    assert {p.host for p in handler.pools.of("node-a").free.values()} == \
        {"node-a"}
    pods = on(world, "node-b", 3, "b")
    arrive(handler, pods)
    wait_for(lambda: world.ported(pods))
    for pod in pods:
        [port] = neutron.ports_for(pod["metadata"]["uid"])
        assert bound[port["id"]] == "node-b"          # its own node's pool
        assert port["binding:host_id"] == "node-b"
    assert neutron.updates == 3                       # device_id and name only
    b, a = handler.pools.of("node-b"), handler.pools.of("node-a")
    # (each node's resident pod, listed before the first refill: a miss)
    assert (b.hits, b.misses, a.hits, a.misses) == (3, 1, 0, 1)
    wait_for(lambda: free(handler, "node-b") == 5)    # 1 left + a batch
    handler.pools.publish()
    assert handler.pools.board is not None
    rows = {r["node"]: r for r in handler.pools.board.rows()}
    assert set(rows) == {"node-a", "node-b"}
    assert (rows["node-b"]["hits"], rows["node-b"]["free"]) == (3, 5)
    assert sorted(hosts(world).values()) == ["node-a"] * 4 + ["node-b"] * 5


def test_a_new_node_misses_once_and_gets_its_pool(
        world: World, stopping: threading.Event) -> None:
    small(world)
    neutron = world.neutron
    assert isinstance(neutron, PooledNeutron)
    handler = running(world, stopping, ("node-a",))
    filled(handler, "node-a")
    # The new node's pool starts with its first pod; a refill slower than
    # the pods' own creates leaves them no port to take.
    neutron.port_delay = 0.4
    pods = on(world, "node-c", 2, "c")
    arrive(handler, pods)
    wait_for(lambda: world.ported(pods))
    for pod in pods:                                   # made as ever, bound
        [port] = neutron.ports_for(pod["metadata"]["uid"])
        assert "kuryr-supervisor-pool" not in port["tags"]
        assert port["binding:host_id"] == "node-c"
    c = handler.pools.of("node-c")
    assert (c.hits, c.misses) == (0, 2)
    filled(handler, "node-a", "node-c")                # c's pool started
    neutron.port_delay = 0.0
    assert sorted(hosts(world).values()) == ["node-a"] * 4 + ["node-c"] * 4
    more = on(world, "node-c", 1, "c2-")
    arrive(handler, more)
    wait_for(lambda: world.ported(more))
    assert handler.pools.of("node-c").hits == 1


def test_the_quota_bounds_all_pools_together(
        world: World, stopping: threading.Event) -> None:
    """All pools within the quota, less a port for a miss on each node."""
    small(world)
    world.neutron.port_limit = 9                       # 3 residents + 6
    handler = running(world, stopping, ("node-a", "node-b", "node-c"))
    wait_for(lambda: len(world.neutron.ports) == 6)
    time.sleep(0.6)
    assert len(world.neutron.ports) == 6
    assert sum(free(handler, n) for n in ("node-a", "node-b", "node-c")) == 3


def test_a_restart_readopts_each_port_into_its_nodes_pool(
        world: World, stopping: threading.Event) -> None:
    small(world)
    handler = running(world, stopping, ("node-a", "node-b"))
    filled(handler, "node-a", "node-b")
    before = {n: set(handler.pools.of(n).free) for n in ("node-a", "node-b")}
    posts = world.neutron.counts()["POST /v2.0/ports"]
    again = running(world, stopping, ("node-a", "node-b"))
    filled(again, "node-a", "node-b")
    time.sleep(0.5)
    assert {n: set(again.pools.of(n).free) for n in before} == before
    assert world.neutron.counts()["POST /v2.0/ports"] == posts
    assert world.neutron.counts()["DELETE /v2.0/ports/{id}"] == 0


def test_a_node_without_pods_gives_its_pool_back(
        world: World, stopping: threading.Event) -> None:
    small(world, ports_pool_node_idle=0.5, ports_pool_update_frequency=0.1)
    handler = running(world, stopping, ("node-a", "node-b"))
    filled(handler, "node-a", "node-b")
    gone = set(handler.pools.of("node-b").free)
    pod = world.api.pods[("ns", "resident-node-b")]
    world.api.delete_pod("ns", "resident-node-b")
    handler.delete(cluster_pod(pod))                   # its DELETED event
    time.sleep(0.3)
    assert set(hosts(world)) >= gone                   # kept while idle
    wait_for(lambda: not set(hosts(world)) & gone)     # then given back
    assert sorted(hosts(world).values()) == ["node-a"] * 4
    handler.pools.publish()
    assert handler.pools.board is not None
    assert [r["node"] for r in handler.pools.board.rows()] == ["node-a"]


def test_without_binding_rights_one_unbound_pool(
        world: World, stopping: threading.Event) -> None:
    """A member user: Neutron refuses binding:host_id (403). The pools
    fall back to one unbound pool, as before pools were per node; pods of
    every node take from it, their ports updated without a binding."""
    small(world)
    world.neutron.keystone.roles = ["member"]
    neutron = world.neutron
    handler = running(world, stopping, ("node-a", "node-b"))
    wait_for(lambda: free(handler, "") == 4)
    assert handler.pools.bind is False
    assert set(hosts(world).values()) == {""}
    pods = on(world, "node-a", 1, "a") + on(world, "node-b", 1, "b")
    arrive(handler, pods)
    wait_for(lambda: world.ported(pods))
    assert handler.pools.of("").hits == 2
    assert neutron.counts().get("PUT /v2.0/ports/{id}", 0) >= 2
