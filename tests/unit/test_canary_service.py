"""The network_canary handler's canary Service, where the services handler
runs: a selector-less Service of ours with an EndpointSlice of ours
listing the canaries that are up, its VIP in the specs of the nodes on
the ring; written only when it differs; someone else's Service of that
name left alone; nothing of it without the services handler; taken away
on uninstall. In the test's process, against the fake API (Services and
slices written through it, clusterIP allocated) and the fake Neutron."""
from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path

import pytest

from kuryr_supervisor.netcheck.codecs import servicespec
from kuryr_supervisor.netcheck.judge import canaryservice as cs
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.openstack import FakeKeystone, FakeNeutron
from tests.unit.test_network_canary import NODES, Clock, World
from tests.unit.test_neutronport import Counts
from tests.unit.test_openstack import neutron_conf

KEY = (cs.NAMESPACE, cs.NAME)


def make(tmp_path: Path, handlers: str, subnet: str) -> Iterator[World]:
    api = FakeAPI().start()
    keystone = FakeKeystone().start()
    neutron = FakeNeutron(keystone).start()
    conf = neutron_conf(tmp_path, keystone, pod_network_id=neutron.network_id,
                        pod_subnet_id=neutron.subnet["id"], handlers=handlers)
    conf.set_override("service_subnet_id", subnet, "services")
    conf.set_override("release_on_stop", True, "network_health")
    yield World(api, neutron, conf, Clock(), Counts())
    neutron.stop()
    keystone.stop()
    api.stop()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    yield from make(tmp_path, "neutron_port,network_canary,services",
                    "service-subnet")


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[World]:
    yield from make(tmp_path, "neutron_port,network_canary", "")


def up(world: World, handler: object, nodes: tuple[str, ...]) -> None:
    """Every node writes its record, gets its port, says its canary up."""
    for node in nodes:
        world.node_writes(node)
    world.sync(handler)
    handler.tick()                                  # type: ignore[attr-defined]
    ports = world.canaries()
    for node in nodes:
        world.node_writes(node, ports[node]["id"])
    world.sync(handler)
    handler.tick()                                  # type: ignore[attr-defined]
    world.sync(handler)


def addresses(world: World) -> dict[str, str]:
    """node -> its canary's address, as Neutron has it."""
    return {n: p["fixed_ips"][0]["ip_address"]
            for n, p in world.canaries().items()}


def test_the_canary_service_lists_the_canaries_up(world: World) -> None:
    handler = world.handler()
    assert handler.service is not None
    up(world, handler, NODES[:3])
    svc = world.api.services[KEY]
    assert svc["metadata"]["labels"] == cs.LABELS
    assert "selector" not in svc["spec"]
    assert svc["spec"]["ports"] == [{"name": "canary", "protocol": "TCP",
                                     "port": 8094, "targetPort": 8094}]
    vip = svc["spec"]["clusterIP"]
    assert ipaddress.IPv4Address(vip) in ipaddress.IPv4Network(
        world.api.service_cidr)
    eps = world.api.endpointslices[KEY]
    labels = eps["metadata"]["labels"]
    assert labels["kubernetes.io/service-name"] == cs.NAME
    assert labels["endpointslice.kubernetes.io/managed-by"] == \
        "kuryr-supervisor"
    assert eps["metadata"]["ownerReferences"][0]["uid"] == \
        svc["metadata"]["uid"]
    assert {e["nodeName"]: e["addresses"][0] for e in eps["endpoints"]} == \
        addresses(world)
    assert all(e["conditions"]["ready"] for e in eps["endpoints"])
    assert eps["ports"] == [{"name": "canary", "protocol": "TCP",
                             "port": 8094}]
    for node in NODES[:3]:
        target = servicespec.target(world.api.nodenetworks[node], node)
        assert target == servicespec.ServiceTarget(
            ipaddress.IPv4Address(vip), 8094)
        # The other parts of the spec are still there.
        assert world.spec(node).interval > 0

    # Nothing differs: nothing written, nothing read but the records.
    writes, svc_writes = handler.writes, handler.service.writes
    requests = len(world.api.requests)
    for _ in range(3):
        handler.tick()
    assert (handler.writes, handler.service.writes) == (writes, svc_writes)
    assert not [r for r in world.api.requests[requests:]
                if "services" in r[2] or "endpointslices" in r[2]]

    # A node's canary goes down: out of the slice, its spec names no VIP.
    world.node_writes("node-c")
    world.sync(handler)
    world.clock.now += 3
    handler.tick()
    world.sync(handler)
    eps = world.api.endpointslices[KEY]
    assert {e["nodeName"] for e in eps["endpoints"]} == {"node-a", "node-b"}
    assert servicespec.target(world.api.nodenetworks["node-c"],
                              "node-c") is None

    # Someone edits the slice: undone at the next full pass.
    world.api.put_endpointslice(cs.NAMESPACE, cs.NAME, cs.NAME,
                                addresses=["10.20.0.200"],
                                ports={"canary": 8094})
    world.clock.now += 120
    world.sync(handler)
    handler.tick()
    eps = world.api.endpointslices[KEY]
    assert {e["nodeName"] for e in eps["endpoints"]} == {"node-a", "node-b"}


def test_someone_elses_service_of_that_name_is_left_alone(
        world: World) -> None:
    theirs = world.api.add_service(cs.NAMESPACE, cs.NAME, "10.43.0.50",
                                   ports=[{"port": 80, "protocol": "TCP"}],
                                   selector={"app": "x"})
    handler = world.handler()
    up(world, handler, NODES[:3])
    assert world.api.services[KEY]["spec"] == theirs["spec"]
    assert KEY not in world.api.endpointslices
    for node in NODES[:3]:
        assert servicespec.target(world.api.nodenetworks[node],
                                  node) is None
        assert world.spec(node).interval > 0       # the canaries still work


def test_without_the_services_handler_there_is_no_canary_service(
        bare: World) -> None:
    handler = bare.handler()
    assert handler.service is None
    up(bare, handler, NODES[:3])
    assert not bare.api.services and not bare.api.endpointslices
    for node in NODES[:3]:
        assert "canaryService" not in bare.api.nodenetworks[node]["spec"]


def test_uninstalling_takes_the_canary_service_away(world: World) -> None:
    handler = world.handler()
    up(world, handler, NODES[:3])
    assert KEY in world.api.services
    handler.release_all()
    assert KEY not in world.api.services
    assert KEY not in world.api.endpointslices
    for node in NODES[:3]:
        assert "canaryService" not in world.api.nodenetworks[node]["spec"]


def test_a_crd_that_drops_the_vip_gets_no_write_storm(world: World) -> None:
    """An API server whose NodeNetwork CRD predates ``canaryService``
    prunes it from every write: said once, then written no more."""
    real = world.api.nodenetworks
    handler = world.handler()
    for node in NODES[:3]:
        world.node_writes(node)
    world.sync(handler)
    handler.tick()
    original = handler.client.nodenetworks.replace

    def pruning(name: str, obj: dict, **kw: object) -> dict:
        obj = dict(obj)
        obj["spec"] = {k: v for k, v in obj["spec"].items()
                       if k != "canaryService"}
        return original(name, obj, **kw)
    handler.client.nodenetworks.replace = pruning  # type: ignore[method-assign]
    ports = world.canaries()
    for node in NODES[:3]:
        world.node_writes(node, ports[node]["id"])
    world.sync(handler)
    handler.tick()
    world.sync(handler)
    assert handler.vip is not None and handler.vip_dropped
    writes = handler.writes
    for _ in range(5):
        world.clock.now += 1
        handler.tick()
    assert handler.writes == writes
    assert all("canaryService" not in real[n]["spec"] for n in NODES[:3])


def test_a_node_the_judge_holds_faulty_leaves_the_endpoints(
        world: World) -> None:
    handler = world.handler()
    up(world, handler, NODES[:3])
    world.api.nodenetworks["node-b"]["spec"]["cluster"] = {
        "node": {"reason": "KuryrPeersUnreachable"}}
    world.sync(handler)
    handler.tick()
    eps = world.api.endpointslices[KEY]
    assert {e["nodeName"] for e in eps["endpoints"]} == {"node-a", "node-c"}
    # Its own spec still names the VIP: it still probes it.
    assert servicespec.target(world.api.nodenetworks["node-b"],
                              "node-b") is not None
    world.api.nodenetworks["node-b"]["spec"].pop("cluster")
    world.sync(handler)
    handler.tick()
    eps = world.api.endpointslices[KEY]
    assert {e["nodeName"] for e in eps["endpoints"]} == set(NODES[:3])
