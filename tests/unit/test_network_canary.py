"""The network_canary handler in the test's own process, against the fake
API and the fake Neutron over real HTTP, on a fake clock: a canary port
per node with a record (as for a pod, under a device_owner of its own),
its spec written, the probing shared out once the canaries are up, ports
of nodes gone and duplicates deleted, a canary port deleted behind our
back made again; and the port handler's sweep never deleting a canary."""
from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.runtime import HandlerContext, Runtime
from kuryr_supervisor.netcheck.codecs import canaryspec
from kuryr_supervisor.netcheck.codecs import record as nn
from kuryr_supervisor.netcheck.judge import assembly, peers
from kuryr_supervisor.netcheck.judge.canary import NetworkCanaryHandler
from kuryr_supervisor.netcheck.judge.canaryports import (
    CANARY_TAG,
    device_id,
)
from kuryr_supervisor.netcheck.judge.records import RecordSource
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.openstack import FakeKeystone, FakeNeutron
from tests.unit.test_neutronport import Counts
from tests.unit.test_neutronport import World as PortWorld
from tests.unit.test_openstack import neutron_conf

NODES = ("node-a", "node-b", "node-c", "node-d")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class World:
    api: FakeAPI
    neutron: FakeNeutron
    conf: Any
    clock: Clock
    counts: Counts

    def handler(self) -> NetworkCanaryHandler:
        ctx = HandlerContext(self.conf, self.counts, lambda ready: None,  # type: ignore[arg-type]
                             component="handler:network_canary")  # type: ignore[arg-type]
        return assembly.canary(Runtime(
            ctx, kubernetes=self.api.client("controller"),
            openstack=osa.OpenStack.from_conf(self.conf)), clock=self.clock)

    def sync(self, handler: NetworkCanaryHandler) -> None:
        """The handler's list of every record (its watch does the same)."""
        handler.book.replace_all(*RecordSource(handler.client,
                                               page_size=3).list())

    def node_writes(self, node: str, canary: str = "", *,
                    ghost: bool = False) -> None:
        """``node``'s daemon writes its record (its canary up when
        ``canary`` names the port); its Node exists unless ``ghost``."""
        if not ghost and node not in self.api.nodes:
            self.api.add_node(node)
        report = nn.NetworkReport(
            nn.Daemon(True, 1.7e9),
            canary=nn.Canary("10.20.0.9", canary) if canary else None,
            canary_wanted=True)
        old = self.api.nodenetworks.get(node)
        self.api.put_nodenetwork(node, nn.status(report, heartbeat_seconds=60,
                                                 wall=1.7e9))
        if old is not None:          # the node keeps the controller's spec
            self.api.nodenetworks[node]["spec"] = old["spec"]

    def canaries(self) -> dict[str, dict[str, Any]]:
        """node -> its canary port, as Neutron has them."""
        return {p["device_id"].split(":", 1)[1]: p
                for p in self.neutron.ports.values()
                if p["device_owner"] == osa.CANARY_OWNER}

    def spec(self, node: str) -> canaryspec.Assignment:
        return canaryspec.assignment(self.api.nodenetworks[node], node)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    api = FakeAPI().start()
    keystone = FakeKeystone().start()
    neutron = FakeNeutron(keystone).start()
    conf = neutron_conf(tmp_path, keystone, pod_network_id=neutron.network_id,
                        pod_subnet_id=neutron.subnet["id"],
                        handlers="neutron_port,network_canary")
    yield World(api, neutron, conf, Clock(), Counts())
    neutron.stop()
    keystone.stop()
    api.stop()


def test_a_canary_per_node_then_the_probing_shared(world: World) -> None:
    for node in NODES[:3]:
        world.node_writes(node)
    # A node that plugs no canary (the Linux bridge binding) gets none.
    world.api.put_nodenetwork("node-x", nn.status(nn.NetworkReport(
        nn.Daemon(True, 1.7e9)), heartbeat_seconds=60, wall=1.7e9))
    handler = world.handler()
    world.sync(handler)
    handler.tick()
    ports = world.canaries()
    assert set(ports) == set(NODES[:3])
    tag = f"kuryr-supervisor:{world.api.namespaces['kube-system']}"
    for node, port in ports.items():
        # As for a pod: the pod network, its subnet, bound to the node,
        # the cluster tag; a device_owner and a tag of its own.
        assert port["network_id"] == world.neutron.network_id
        assert port["fixed_ips"][0]["subnet_id"] == world.neutron.subnet["id"]
        assert port["binding:host_id"] == node
        assert set(port["tags"]) == {tag, CANARY_TAG}
        assert port["device_id"] == device_id(node)
        spec = world.spec(node)
        assert spec.canary is not None and spec.canary.port_id == port["id"]
        assert spec.canary.mac == port["mac_address"]
        assert str(spec.canary.address) == \
            f"{port['fixed_ips'][0]['ip_address']}/24"
        assert str(spec.canary.gateway) == "10.20.0.1"
        assert spec.peers == () and spec.interval == 0    # not up yet
    writes = handler.writes
    handler.tick()
    assert handler.writes == writes      # nothing differs: nothing written

    # The canaries come up (each node says so): the ring.
    for node in NODES[:3]:
        world.node_writes(node, ports[node]["id"])
    world.sync(handler)
    handler.tick()
    shares = {n: world.spec(n) for n in NODES[:3]}
    probed: dict[str, int] = {}
    for node, share in shares.items():
        assert share.interval == 2.0          # probe_interval
        assert len(share.peers) == 2 and node not in {t.node for t in
                                                      share.peers}
        for target in share.peers:
            probed[target.node] = probed.get(target.node, 0) + 1
            assert str(target.address) == \
                ports[target.node]["fixed_ips"][0]["ip_address"]
    assert probed == dict.fromkeys(NODES[:3], 2)   # two witnesses each
    assert world.counts.total == 0


def test_nodes_gone_duplicates_and_a_port_deleted_behind_our_back(
        world: World) -> None:
    for node in NODES:
        world.node_writes(node)
    handler = world.handler()
    world.sync(handler)
    handler.tick()
    ports = world.canaries()
    for node in NODES:
        world.node_writes(node, ports[node]["id"])
    world.sync(handler)
    handler.tick()
    # A second port for node-a (another replica's late create): deleted,
    # the oldest kept.
    extra = world.neutron.add_foreign_port(
        device_id=device_id("node-a"),
        tags=list(world.neutron.ports[ports["node-a"]["id"]]["tags"]))
    extra["device_owner"] = osa.CANARY_OWNER
    # node-d is gone (its record deleted with its Node).
    world.api.delete_nodenetwork("node-d")
    world.sync(handler)
    world.clock.now += 60
    handler.tick()
    left = world.canaries()
    assert set(left) == {"node-a", "node-b", "node-c"}
    assert left["node-a"]["id"] == ports["node-a"]["id"]
    assert extra["id"] not in world.neutron.ports
    assert all("node-d" not in {t.node for t in world.spec(n).peers}
               for n in left)

    # node-b's canary port is deleted in Neutron: its node says its canary
    # is down; the next tick lists at once and makes a new one.
    with world.neutron.lock:
        world.neutron._remove(ports["node-b"]["id"])
    world.node_writes("node-b")
    world.sync(handler)
    world.clock.now += 3
    handler.tick()
    again = world.canaries()["node-b"]
    assert again["id"] != ports["node-b"]["id"]
    assert world.spec("node-b").canary.port_id == again["id"]  # type: ignore[union-attr]
    # Until it is up again nobody probes it.
    assert all("node-b" not in {t.node for t in world.spec(n).peers}
               for n in ("node-a", "node-c"))


def test_records_of_no_node_get_no_canary_and_no_place_on_the_ring(
        world: World) -> None:
    """Twenty records named after no Node (a hostile or misconfigured
    daemon): no Neutron port is made for any, none is written a spec or
    probed, and the real nodes' ports and ring are as without them; a
    port made for a name whose Node is then deleted is swept."""
    for node in NODES:
        world.node_writes(node)
    ghosts = [f"ghost-{i:02d}" for i in range(20)]
    for ghost in ghosts:
        world.node_writes(ghost, ghost=True)
    handler = world.handler()
    world.sync(handler)
    handler.tick()
    ports = world.canaries()
    assert set(ports) == set(NODES)
    for node in NODES:
        world.node_writes(node, ports[node]["id"])
    for ghost in ghosts:                # they even claim a canary is up
        world.node_writes(ghost, ports["node-a"]["id"], ghost=True)
    world.sync(handler)
    handler.tick()
    assert set(world.canaries()) == set(NODES)
    for ghost in ghosts:
        assert "canary" not in world.api.nodenetworks[ghost]["spec"]
        assert "probe" not in world.api.nodenetworks[ghost]["spec"]
    for node in NODES:
        assert {t.node for t in world.spec(node).peers} <= set(NODES)
    # One lookup per ghost, not one per tick.
    gets = [r for r in world.api.requests
            if r[1] == "GET" and r[2].startswith("/api/v1/nodes/ghost")]
    assert len(gets) == len(ghosts)
    # node-d's Node is deleted (its record lingers): its port is swept at
    # the next Node list, and nobody probes it.
    with world.api.cond:
        del world.api.nodes["node-d"]
    world.clock.now += 301
    handler.tick()
    assert set(world.canaries()) == {"node-a", "node-b", "node-c"}
    assert all("node-d" not in {t.node for t in world.spec(n).peers}
               for n in ("node-a", "node-b", "node-c"))


def test_the_port_handlers_sweep_never_deletes_a_canary(world: World) -> None:
    world.node_writes("node-a")
    canary_handler = world.handler()
    world.sync(canary_handler)
    canary_handler.tick()
    [canary] = world.canaries().values()
    # A pod's port leaked (its pod is gone): the sweep's to delete.
    ports = PortWorld(world.api, world.neutron, world.conf, Counts())
    handler = ports.handler()
    tag = f"kuryr-supervisor:{world.api.namespaces['kube-system']}"
    leaked = world.neutron.add_foreign_port(device_id="gone-pod-uid",
                                            tags=[tag])
    ports.start(handler)                   # the list, the resync, the sweep
    assert leaked["id"] not in world.neutron.ports    # the sweep ran
    assert canary["id"] in world.neutron.ports    # and left the canary


def test_canaries_on_a_neutron_that_drops_a_creates_tags(
        world: World) -> None:
    """Neutron's default (no ``tag_ports_during_bulk_creation``): each
    canary is tagged after its create, so later passes find it and make
    no other; a failed tag call is tried again at the next pass; a canary
    whose tag call was lost for good (the controller died between the two
    calls) is adopted by a new controller's first pass, never leaked nor
    made again."""
    world.neutron.drop_create_tags = True
    world.neutron.fail_tag_calls = 1           # node-a's: tried again
    for node in NODES[:3]:
        world.node_writes(node)
    handler = world.handler()
    world.sync(handler)
    tag = f"kuryr-supervisor:{world.api.namespaces['kube-system']}"
    for _ in range(3):
        handler.tick()
        handler.ports.reconcile(NODES[:3])        # a resync's pass
    ports = world.canaries()
    assert set(ports) == set(NODES[:3])
    assert len([p for p in world.neutron.ports.values()
                if p["device_owner"] == osa.CANARY_OWNER]) == 3
    assert all(set(p["tags"]) == {tag, CANARY_TAG} for p in ports.values())
    lost = ports["node-c"]
    lost["tags"] = []                  # its tag call never happened
    again = world.handler()            # a new controller
    world.sync(again)
    again.tick()
    assert world.canaries()["node-c"]["id"] == lost["id"]
    assert set(lost["tags"]) == {tag, CANARY_TAG}
    assert len([p for p in world.neutron.ports.values()
                if p["device_owner"] == osa.CANARY_OWNER]) == 3


def test_uninstalling_takes_every_canary_away(world: World) -> None:
    """``release_on_stop``: a graceful stop takes the canary out of every
    record's spec (the judge's part kept) and deletes every canary port
    of the cluster; another cluster's canary is left alone."""
    for node in NODES[:3]:
        world.node_writes(node)
    handler = world.handler()
    world.sync(handler)
    handler.tick()
    ports = world.canaries()
    for node in NODES[:3]:
        world.node_writes(node, ports[node]["id"])
    world.sync(handler)
    handler.tick()
    assert world.spec("node-a").interval > 0          # probing
    judged = dict(world.api.nodenetworks["node-b"])
    judged["spec"] = {**judged["spec"], "cluster": {}}     # the judge's part
    world.api.nodenetworks["node-b"] = judged
    other = world.neutron.add_foreign_port(
        device_id=device_id("node-a"), tags=["kuryr-supervisor:other",
                                             CANARY_TAG])
    other["device_owner"] = osa.CANARY_OWNER
    world.conf.set_override("release_on_stop", True, "network_health")
    stopping = threading.Event()
    stopping.set()                                         # SIGTERM
    handler.run(stopping, lambda: None)
    handler.finish(1.0)
    assert set(world.canaries()) == {"node-a"}
    assert [p["id"] for p in world.neutron.ports.values()
            if p["device_owner"] == osa.CANARY_OWNER] == [other["id"]]
    for node in NODES[:3]:
        spec = world.api.nodenetworks[node]["spec"]
        assert "canary" not in spec and "probe" not in spec, spec
        assert world.spec(node) == canaryspec.Assignment()
    assert world.api.nodenetworks["node-b"]["spec"]["cluster"] == {}


def test_the_ring_and_the_interval() -> None:
    up = ["a", "b", "c", "d", "e"]
    assert peers.ring(up, "d", 3) == ("e", "a", "b")
    assert peers.ring(up, "x", 3) == ()
    assert peers.ring(["a", "b"], "a", 3) == ("b",)
    # Bounded cluster-wide: 1000 nodes, 3 peers, 100 probes/s -> 40 s.
    assert peers.interval(1000, 3, 5.0, 100.0) == 40.0
    assert peers.interval(4, 3, 5.0, 100.0) == 5.0
    port = canaryspec.CanaryPort("p", "fa:16:3e:00:00:01",
                                 ipaddress.IPv4Interface("10.0.0.2/24"))
    out = peers.assign(["a", "b"], {"a": port, "b": port}, {"a"}, k=3,
                       base=5.0, rate=100.0)
    assert out["a"].interval == 5.0 and out["a"].peers == ()
    assert out["b"].interval == 0.0        # not up: it does not probe
