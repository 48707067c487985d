"""The nodes' own ports into the pod network, made by the network_canary
handler in the test's own process against the fake API and the fake
Neutron over real HTTP: one per node that plugs a canary (the OVS
binding's), bound to it, under a device_owner and a tag of its own, in
the nodes' security group which the pods' group (the project's default)
admits; named in the node's spec beside its canary; duplicates, gone
nodes' ports and duplicate groups reclaimed; a restart writes nothing;
uninstalling takes them all away."""
from __future__ import annotations

import threading
from typing import Any

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.netcheck.codecs import nodeportspec
from kuryr_supervisor.netcheck.codecs import record as nn
from kuryr_supervisor.netcheck.judge.nodegroups import group_name
from kuryr_supervisor.netcheck.judge.nodeports import NODE_PORT_TAG, device_id
from tests.unit.test_network_canary import NODES, World, world  # noqa: F401
from tests.unit.test_neutronport import Counts
from tests.unit.test_neutronport import World as PortWorld

WRITES = ("POST", "PUT", "DELETE")


def wants(w: World, node: str, *, canary: bool = True,
          node_port: bool = True) -> None:
    """``node``'s daemon writes its record: it plugs a canary and a node
    port when given them (the OVS binding's defaults)."""
    if node not in w.api.nodes:
        w.api.add_node(node)
    old = w.api.nodenetworks.get(node)
    w.api.put_nodenetwork(node, nn.status(nn.NetworkReport(
        nn.Daemon(True, 1.7e9), canary_wanted=canary,
        node_port_wanted=node_port), heartbeat_seconds=60, wall=1.7e9))
    if old is not None:          # the node keeps the controller's spec
        w.api.nodenetworks[node]["spec"] = old["spec"]


def node_ports(w: World) -> dict[str, dict[str, Any]]:
    """node -> its node port, as Neutron has them."""
    return {p["device_id"].split(":", 1)[1]: p
            for p in w.neutron.ports.values()
            if p["device_owner"] == osa.NODE_OWNER}


def tag_of(w: World) -> str:
    return f"kuryr-supervisor:{w.api.namespaces['kube-system']}"


def groups_named(w: World, name: str) -> list[dict[str, Any]]:
    with w.neutron.lock:
        return [g for g in w.neutron.groups.all_groups() if g["name"] == name]


def writes(w: World) -> int:
    """Neutron's write requests so far."""
    return sum(1 for _, method, _ in w.neutron.requests if method in WRITES)


def rules(w: World) -> set[tuple[str, str, str]]:
    return {(r["security_group_id"], r["remote_group_id"], r["direction"])
            for r in w.neutron.groups.rules.values()}


def test_a_node_port_per_node_in_the_nodes_group(world: World) -> None:  # noqa: F811
    for node in NODES[:2]:
        wants(world, node)
    # A node that plugs a node port and no canary gets its node port.
    wants(world, NODES[2], canary=False)
    # A node that plugs none (the Linux bridge binding, or an older
    # daemon that plugs a canary alone) gets none.
    world.api.put_nodenetwork("node-x", nn.status(nn.NetworkReport(
        nn.Daemon(True, 1.7e9)), heartbeat_seconds=60, wall=1.7e9))
    wants(world, NODES[3], node_port=False)
    handler = world.handler()
    world.sync(handler)
    handler.tick()
    ports, tag = node_ports(world), tag_of(world)
    assert set(ports) == set(NODES[:3])
    assert set(world.canaries()) == {*NODES[:2], NODES[3]}
    assert "nodePort" not in world.api.nodenetworks[NODES[3]]["spec"]
    [group] = groups_named(world, group_name(tag))
    assert group["tags"] == [tag]
    default = world.neutron.security_groups[group["project_id"]]
    # The pods' group admits the nodes' ports, the nodes' group the pods:
    # nothing else.
    assert rules(world) == {(default, group["id"], "ingress"),
                            (group["id"], default, "ingress")}
    for node, port in ports.items():
        assert port["network_id"] == world.neutron.network_id
        assert port["fixed_ips"][0]["subnet_id"] == world.neutron.subnet["id"]
        assert port["binding:host_id"] == node
        assert set(port["tags"]) == {tag, NODE_PORT_TAG}
        assert port["device_id"] == device_id(node)
        assert port["security_groups"] == [group["id"]]
        own = nodeportspec.node_port(world.api.nodenetworks[node], node)
        assert own is not None and own.port_id == port["id"]
        assert own.mac == port["mac_address"]
        assert str(own.address) == f"{port['fixed_ips'][0]['ip_address']}/24"
        assert str(own.gateway) == "10.20.0.1"
        # The canary's part is there too, beside it (a node that plugs
        # one).
        assert (world.spec(node).canary is not None) == (node != NODES[2])
    assert "nodePort" not in world.api.nodenetworks["node-x"].get("spec", {})
    # The canaries keep the pods' group (none named).
    assert all(p["security_groups"] == [default]
               for p in world.canaries().values())

    # Nothing differs: nothing written, to Neutron or to the API.
    before, spec_writes = writes(world), handler.writes
    world.clock.now += 61
    handler.tick()
    assert (writes(world), handler.writes) == (before, spec_writes)
    # A restart (a new controller, its first pass): nothing written.
    again = world.handler()
    world.sync(again)
    again.tick()
    assert (writes(world), again.writes) == (before, 0)
    assert node_ports(world) == ports


def test_duplicates_gone_nodes_and_things_deleted_behind_our_back(
        world: World) -> None:  # noqa: F811
    for node in NODES:
        wants(world, node)
    handler = world.handler()
    world.sync(handler)
    handler.tick()
    ports, tag = node_ports(world), tag_of(world)
    [group] = groups_named(world, group_name(tag))
    extra = world.neutron.add_foreign_port(
        device_id=device_id("node-a"), tags=[tag, NODE_PORT_TAG])
    extra["device_owner"] = osa.NODE_OWNER
    # A second group of that name left by a handover mid-create (tagged):
    # deleted; one of that name not tagged as ours: left alone.
    with world.neutron.lock:
        twin = {**group, "id": "twin-group", "created_at": "2999"}
        stranger = {**group, "id": "stranger", "tags": [],
                    "created_at": "2999"}
        world.neutron.groups.groups.update(
            {"twin-group": twin, "stranger": stranger})
    # The pods' group's rule deleted behind our back.
    [pods_rule] = [rid for rid, r in world.neutron.groups.rules.items()
                   if r["remote_group_id"] == group["id"]]
    del world.neutron.groups.rules[pods_rule]
    world.api.delete_nodenetwork("node-d")
    world.sync(handler)
    world.clock.now += 61
    handler.tick()
    left = node_ports(world)
    assert set(left) == {"node-a", "node-b", "node-c"}
    assert left["node-a"]["id"] == ports["node-a"]["id"]
    assert extra["id"] not in world.neutron.ports
    assert {g["id"] for g in groups_named(world, group_name(tag))} == {
        group["id"], "stranger"}
    default = world.neutron.security_groups[group["project_id"]]
    assert (default, group["id"], "ingress") in rules(world)

    # node-b's port deleted in Neutron: made again at the next pass, and
    # its spec says the new one.
    with world.neutron.lock:
        world.neutron._remove(ports["node-b"]["id"])
    world.clock.now += 61
    handler.tick()
    again = node_ports(world)["node-b"]
    assert again["id"] != ports["node-b"]["id"]
    own = nodeportspec.node_port(world.api.nodenetworks["node-b"], "node-b")
    assert own is not None and own.port_id == again["id"]


def test_the_port_handlers_sweep_never_deletes_a_node_port(
        world: World) -> None:  # noqa: F811
    wants(world, "node-a")
    handler = world.handler()
    world.sync(handler)
    handler.tick()
    [mine] = node_ports(world).values()
    ports = PortWorld(world.api, world.neutron, world.conf, Counts())
    pod_handler = ports.handler()
    leaked = world.neutron.add_foreign_port(device_id="gone-pod-uid",
                                            tags=[tag_of(world)])
    ports.start(pod_handler)
    assert leaked["id"] not in world.neutron.ports
    assert mine["id"] in world.neutron.ports


def test_node_ports_on_a_neutron_that_drops_a_creates_tags(
        world: World) -> None:  # noqa: F811
    world.neutron.drop_create_tags = True
    for node in NODES[:2]:
        wants(world, node)
    handler = world.handler()
    world.sync(handler)
    handler.tick()
    ports, tag = node_ports(world), tag_of(world)
    assert all(set(p["tags"]) == {tag, NODE_PORT_TAG} for p in ports.values())
    ports["node-b"]["tags"] = []           # its tag call never happened
    again = world.handler()
    world.sync(again)
    again.tick()
    assert node_ports(world)["node-b"]["id"] == ports["node-b"]["id"]
    assert set(ports["node-b"]["tags"]) == {tag, NODE_PORT_TAG}
    assert len(node_ports(world)) == 2


def test_off_makes_none(world: World) -> None:  # noqa: F811
    world.conf.set_override("enabled", False, "node_port")
    wants(world, "node-a")
    handler = world.handler()
    world.sync(handler)
    handler.tick()
    assert node_ports(world) == {} and world.canaries()
    assert "nodePort" not in world.api.nodenetworks["node-a"]["spec"]
    assert world.neutron.groups.groups == {}


def test_uninstalling_takes_every_node_port_and_the_group_away(
        world: World) -> None:  # noqa: F811
    for node in NODES[:3]:
        wants(world, node)
    handler = world.handler()
    world.sync(handler)
    handler.tick()
    assert len(node_ports(world)) == 3
    other = world.neutron.add_foreign_port(
        device_id=device_id("node-a"), tags=["kuryr-supervisor:other",
                                             NODE_PORT_TAG])
    other["device_owner"] = osa.NODE_OWNER
    world.conf.set_override("release_on_stop", True, "network_health")
    stopping = threading.Event()
    stopping.set()
    handler.run(stopping, lambda: None)
    handler.finish(1.0)
    assert [p["id"] for p in world.neutron.ports.values()
            if p["device_owner"] == osa.NODE_OWNER] == [other["id"]]
    assert groups_named(world, group_name(tag_of(world))) == []
    assert world.neutron.groups.rules == {}
    for node in NODES[:3]:
        assert "nodePort" not in world.api.nodenetworks[node]["spec"]


def test_the_service_subnets_range_goes_to_the_nodes_with_the_services_handler(
        world: World) -> None:  # noqa: F811
    """Where the controller runs the ``services`` handler, each node's
    ``nodePort`` carries its service subnet's range (which the node routes
    through the port), so no node needs an option of its own; a restart
    writes nothing; without the handler the spec names no range."""
    service = {"id": "5e5e5e5e-0000-4000-8000-000000000001",
               "network_id": world.neutron.network_id, "ip_version": 4,
               "cidr": "10.96.0.0/16", "gateway_ip": None}
    world.neutron.more_subnets.append(service)
    wants(world, NODES[0])
    plain = world.handler()
    world.sync(plain)
    plain.tick()
    own = nodeportspec.node_port(world.api.nodenetworks[NODES[0]], NODES[0])
    assert own is not None and own.service_cidr is None
    world.conf.set_override("handlers", ["neutron_port", "network_canary",
                                         "services"], group="controller")
    world.conf.set_override("service_subnet_id", service["id"],
                            group="services")
    handler = world.handler()
    world.sync(handler)
    handler.tick()
    spec = world.api.nodenetworks[NODES[0]]["spec"]
    assert spec["nodePort"]["serviceCIDR"] == "10.96.0.0/16"
    own = nodeportspec.node_port(world.api.nodenetworks[NODES[0]], NODES[0])
    assert own is not None and str(own.service_cidr) == "10.96.0.0/16"
    # A restart: nothing written for it.
    again = world.handler()
    world.sync(again)
    before = writes(world)
    again.tick()
    assert nodeportspec.node_port(world.api.nodenetworks[NODES[0]],
                                  NODES[0]) == own
    assert writes(world) == before


def test_a_service_range_a_node_would_refuse_is_not_named(
        world: World) -> None:  # noqa: F811
    """A service subnet overlapping the pod subnet (or wider than /8) is
    said, and the node port named without a range: the node would refuse
    the whole spec."""
    service = {"id": "5e5e5e5e-0000-4000-8000-000000000002",
               "network_id": world.neutron.network_id, "ip_version": 4,
               "cidr": "10.20.0.0/16", "gateway_ip": None}
    world.neutron.more_subnets.append(service)
    world.conf.set_override("handlers", ["neutron_port", "network_canary",
                                         "services"], group="controller")
    world.conf.set_override("service_subnet_id", service["id"],
                            group="services")
    wants(world, NODES[0])
    handler = world.handler()
    world.sync(handler)
    handler.tick()
    own = nodeportspec.node_port(world.api.nodenetworks[NODES[0]], NODES[0])
    assert own is not None and own.service_cidr is None
