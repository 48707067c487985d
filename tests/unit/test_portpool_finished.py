"""Finished pods with port pools: a pool port a pod took goes when the pod
finishes exactly as when it is deleted (deleted, never put back free),
and a restart deletes a finished pod's pool port whose claim a crash
left unapplied rather than claiming it. In this process, against the
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
from tests.unit.test_port_finished import finish, holds
from tests.unit.test_portpool import free, resident, running, wait_for
from tests.unit.test_portpool_binding import small, tag

#: The fixtures of the pool tests.
world = base.world
stopping = base.stopping


@pytest.fixture
def events() -> Iterator[list[threading.Event]]:
    made: list[threading.Event] = []
    yield made
    for event in made:
        event.set()


def free_ids(handler: NeutronPortHandler) -> set[str]:
    pools = handler.pools
    with pools.lock:
        return {i for pool in pools.pools.values() for i in pool.free}


def test_a_finished_pods_pool_port_goes_as_a_deleted_pods(
        world: World, stopping: threading.Event) -> None:
    neutron = world.neutron
    assert isinstance(neutron, PooledNeutron)
    handler = running(world, stopping)
    wait_for(lambda: free(handler) == 20)
    pods = world.add(3)
    arrive(handler, pods)
    wait_for(lambda: world.ported(pods) and not len(handler.pools.claims))
    taken = [neutron.ports_for(p["metadata"]["uid"])[0]["id"] for p in pods]
    assert all("kuryr-supervisor-pool" in neutron.ports[i]["tags"]
               for i in taken)
    updates = neutron.updates
    handler.upsert(finish(world, pods[0]))              # finished
    world.api.delete_pod("ns", pods[1]["metadata"]["name"])
    handler.delete(cluster_pod(pods[1]))                # deleted
    for pod, port in zip(pods[:2], taken[:2], strict=True):
        assert not holds(world, pod) and port not in neutron.ports
    handler.resync(set())
    wait_for(lambda: free(handler) >= 20)
    assert not set(taken) & free_ids(handler)           # none back free
    assert neutron.updates == updates                   # none claimed again
    assert world.ported(pods[2:]) and world.counts.total == 0


def test_a_restart_deletes_a_finished_pods_unclaimed_pool_port(
        world: World, events: list[threading.Event]) -> None:
    """The controller died between a pod's PodPort (naming a pool port)
    and the port's update, and the pod finished meanwhile: the next one
    deletes the port and the PodPort; it neither claims the port nor puts
    it back free."""
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
    finish(world, pod)
    stopping = threading.Event()
    events.append(stopping)
    again = world.handler()                        # the next controller,
    again.refill.start(stopping)                   # its pools running
    world.start(again)
    wait_for(lambda: free(again) == 3)
    assert spare["id"] not in neutron.ports and not holds(world, pod)
    assert spare["id"] not in free_ids(again)
    assert neutron.updates == 0                    # never claimed
    assert world.counts.total == 0
