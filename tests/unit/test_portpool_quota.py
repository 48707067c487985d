"""Port pools never starve a node of the project's port quota: the pools
together leave room for a miss on every node that runs pods, and a pod
whose port cannot be made because the quota is used up gets one within a
refill period, taken from the fullest pool and bound to its own node. In
this process, against the Kubernetes API fake and a Neutron fake that
updates ports."""
from __future__ import annotations

import threading
import time

from tests.fixtures.poolcloud import PooledNeutron
from tests.unit import test_portpool as base
from tests.unit.test_neutronport import World, arrive
from tests.unit.test_portpool import free, running, wait_for

#: The fixtures of the pool tests.
world, stopping = base.world, base.stopping


def pools_of(world: World, count: int, **more: object) -> None:
    for key, value in {"ports_pool_min": count, "ports_pool_max": count,
                       "ports_pool_batch": count, **more}.items():
        world.conf.set_override(key, value, "vif_pool")


def test_pools_leave_room_for_a_miss_on_every_node(
        world: World, stopping: threading.Event) -> None:
    """Two nodes' pools could take the whole quota; they leave one port
    per node, so a third node's first pod (a miss) gets its port made."""
    pools_of(world, 10)
    world.neutron.port_limit = 22                      # 2 residents + 20
    handler = running(world, stopping, ("node-a", "node-b"))
    wait_for(lambda: free(handler, "node-a") + free(handler, "node-b") >= 18)
    time.sleep(0.6)
    assert len(world.neutron.ports) == 22 - 2, "the pools took the quota"
    pod = world.api.add_pod("ns", "c0", "node-c")
    arrive(handler, [pod])
    wait_for(lambda: world.ported([pod]), 5)
    [port] = world.neutron.ports_for(pod["metadata"]["uid"])
    assert port["binding:host_id"] == "node-c"
    assert world.counts.total == 0


def test_a_pod_starved_by_other_nodes_pools_gets_one_of_their_ports(
        world: World, stopping: threading.Event) -> None:
    """The quota is used up (lowered under the pools): a pod on a node
    without free ports gets, within a refill period, a free port of the
    fullest pool, rebound to its node; no port is bound to a node other
    than its pod's."""
    neutron = world.neutron
    assert isinstance(neutron, PooledNeutron)
    pools_of(world, 4, ports_pool_update_frequency=0.5)
    handler = running(world, stopping, ("node-a", "node-b"))
    wait_for(lambda: free(handler, "node-a") == 4 and
             free(handler, "node-b") == 4)
    neutron.port_limit = len(neutron.ports)            # nothing left
    pods = [world.api.add_pod("ns", f"c{i}", "node-c") for i in range(2)]
    started = time.monotonic()
    arrive(handler, pods)
    deadline = 2 * 0.5 + 1.0                           # a refill period
    while not world.ported(pods) and time.monotonic() - started < deadline:
        handler.tick()
        time.sleep(0.05)
    assert world.ported(pods), "the pods starve"
    for pod in pods:
        [port] = neutron.ports_for(pod["metadata"]["uid"])
        assert port["binding:host_id"] == "node-c"
    assert len(neutron.ports) <= neutron.port_limit
    assert free(handler, "node-a") + free(handler, "node-b") == 6
    for port in neutron.ports.values():              # free ones: their node
        if port["device_id"] == "kuryr-supervisor-pool":
            continue
        pod = next(p for p in world.api.pods.values()
                   if p["metadata"]["uid"] == port["device_id"])
        assert port["binding:host_id"] == pod["spec"]["nodeName"]
    assert world.counts.total == 0
