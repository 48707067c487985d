"""Every path that makes or re-binds a port sets the node binding: a pool
claim restarted after a crash binds the port it gives a pod, and a
controller that loses the right to set ``binding:host_id`` never gives a
pod a port bound to another node. In this process, against the
Kubernetes API fake and a Neutron fake that updates ports."""
from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from kuryr_supervisor.controller.ports.handler import NeutronPortHandler
from kuryr_supervisor.kubernetes.clusterpods import cluster_pod
from tests.fixtures.poolcloud import PooledNeutron
from tests.unit import test_portpool as base
from tests.unit.test_neutronport import World, arrive
from tests.unit.test_portpool import free, resident, running, wait_for

#: The fixtures of the pool tests.
world = base.world


@pytest.fixture
def events() -> Iterator[list[threading.Event]]:
    made: list[threading.Event] = []
    yield made
    for event in made:
        event.set()


def small(world: World) -> None:
    for key, value in (("ports_pool_min", 3), ("ports_pool_max", 3),
                       ("ports_pool_batch", 3)):
        world.conf.set_override(key, value, "vif_pool")


def tag(world: World) -> str:
    return f"kuryr-supervisor:{world.api.namespaces['kube-system']}"


def test_a_claim_restarted_after_a_crash_binds_the_port(
        world: World, events: list[threading.Event]) -> None:
    """A port of the unbound spare pool (left by an older release) taken
    by a pod; the controller dies between the PodPort write and the
    port's update; the next one finishes the update, binding included."""
    neutron = world.neutron
    assert isinstance(neutron, PooledNeutron)
    small(world)
    resident(world, "node-a")
    first = world.handler()
    world.start(first)             # the resident pod's port made
    with neutron.lock:
        spare = neutron._make({
            "network_id": neutron.network_id, "device_owner": "compute:kuryr",
            "device_id": "kuryr-supervisor-pool", "name": "kuryr-pool",
            "tags": [tag(world), "kuryr-supervisor-pool"]})
    first.resync(set())            # the spare found, in the unbound pool
    first.pools.stop()             # the claim is never applied: a crash
    pod = world.api.add_pod("ns", "p0", "node-a")
    arrive(first, [pod])
    assert world.api.podports[("ns", "p0")]["spec"]["portId"] == spare["id"]
    assert neutron.ports[spare["id"]]["device_id"] == "kuryr-supervisor-pool"
    stopping = threading.Event()
    events.append(stopping)
    again = running(world, stopping)               # the next controller
    again.resync(set())                            # its claims' adapter set
    wait_for(lambda: neutron.ports[spare["id"]]["device_id"] ==
             pod["metadata"]["uid"])
    assert neutron.ports[spare["id"]]["binding:host_id"] == "node-a"


def lose_binding_right(world: World) -> None:
    """The controller's role no longer lets it set binding:host_id (its
    tokens included)."""
    keystone = world.neutron.keystone
    keystone.roles = ["member"]
    with keystone.lock:
        for token in keystone.token_roles:
            keystone.token_roles[token] = ["member"]


def bound_elsewhere(world: World) -> list[str]:
    """Pods whose port is bound to a node that is not theirs."""
    wrong = []
    for pod in world.api.pods.values():
        for port in world.neutron.ports_for(pod["metadata"]["uid"]):
            host = port.get("binding:host_id", "")
            if host and host != pod["spec"]["nodeName"]:
                wrong.append(f"{pod['metadata']['name']} on "
                             f"{pod['spec']['nodeName']}: port bound to {host}")
    return wrong


def test_without_the_right_to_bind_no_pod_gets_another_nodes_port(
        world: World, events: list[threading.Event]) -> None:
    small(world)
    stopping = threading.Event()
    events.append(stopping)
    handler: NeutronPortHandler = running(world, stopping,
                                          ("node-a", "node-b"))
    wait_for(lambda: free(handler, "node-a") == 3 and
             free(handler, "node-b") == 3)
    lose_binding_right(world)
    pods = [world.api.add_pod("ns", f"c{i}", "node-c") for i in range(4)]
    pods += [world.api.add_pod("ns", f"a{i}", "node-a") for i in range(2)]
    for pod in pods:
        handler.upsert(cluster_pod(pod))
    arrive(handler, [])

    def settled() -> bool:
        handler.retries.at = 0.0
        handler.tick()
        return world.ported(pods) and not len(handler.pools.claims)
    wait_for(settled)
    assert bound_elsewhere(world) == []
    assert world.counts.total == 0
