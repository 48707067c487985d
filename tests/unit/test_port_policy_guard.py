"""No unprotected window: beside the network_policy handler, the port
handler makes a pod's port in its policies' security groups (per port in
the bulk create, or in the one PUT that claims a pool port) and puts its
address in the peer address groups it belongs in, before its PodPort is
written; a group not made yet gives the port no group (it admits
nothing) rather than the default groups; without the network_policy
handler, the port handler asks and calls nothing more than before.

In this process, against the fake Kubernetes API and the fake Neutron
over real HTTP; the policy handler (tests/fixtures/policyhandler.py)
makes the groups first, and is stopped while the port handler works, so
what the port carries is the port handler's doing. The order is read from
the fakes' request logs."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.policy import desired as model
from kuryr_supervisor.controller.policy import spec
from kuryr_supervisor.controller.ports import assembly
from kuryr_supervisor.controller.ports.batch import Batch
from kuryr_supervisor.controller.ports.handler import NeutronPortHandler
from kuryr_supervisor.controller.runtime import HandlerContext, Runtime
from kuryr_supervisor.kubernetes.clusterpods import ClusterPods, cluster_pod
from tests.fixtures import policyhandler
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.fakecloud import FakeCloud
from tests.fixtures.policyhandler import World, wait_for
from tests.fixtures.poolcloud import PooledNeutron
from tests.unit.test_neutronport import Counts, Steps, window_ends

WEB = {"app": "web"}
CLIENT = {"role": "client"}
FROM_CLIENTS = {"podSelector": {"matchLabels": WEB},
                "ingress": [{"from": [{"podSelector": {"matchLabels":
                                                        CLIENT}}],
                             "ports": [{"port": 80}]}]}
PODPORTS = "/apis/kuryr-supervisor.openstack.org/v1/namespaces/shop/podports"
NODE_IP = "192.168.50.10"


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    api = FakeAPI().start()
    yield api
    api.stop()


@pytest.fixture
def pooled_cloud() -> Iterator[FakeCloud]:
    cloud = FakeCloud()
    cloud.neutron = PooledNeutron(cloud.keystone, port_limit=500)
    cloud.start()
    yield cloud
    cloud.close()


def _world(api: FakeAPI, cloud: FakeCloud, tmp_path: Path
           ) -> Iterator[World]:
    api.add_namespace("shop", {"team": "shop"})
    api.add_node("node-a", addresses={"InternalIP": NODE_IP})
    yield from policyhandler.world(api, cloud, tmp_path)


@pytest.fixture
def world(api: FakeAPI, fake_cloud: FakeCloud,
          tmp_path: Path) -> Iterator[World]:
    yield from _world(api, fake_cloud, tmp_path)


@pytest.fixture
def pooled(api: FakeAPI, pooled_cloud: FakeCloud,
           tmp_path: Path) -> Iterator[World]:
    yield from _world(api, pooled_cloud, tmp_path)


def port_handler(world: World, *handlers: str,
                 synced: bool = True) -> NeutronPortHandler:
    """The port handler as its process builds it, ``[controller]
    handlers`` as given, its batch window on a clock the test moves;
    ``synced``: its watches of the policies and namespaces listed."""
    world.conf.set_override("handlers", list(handlers), "controller")
    ctx = HandlerContext(world.conf, Counts(), lambda ready: None,  # type: ignore[arg-type]
                         component="handler:neutron_port")  # type: ignore[arg-type]
    handler = assembly.build(Runtime(
        ctx, kubernetes=world.api.client("controller"),
        openstack=osa.OpenStack.from_conf(world.conf)),
        batch=Batch(clock=Steps()))
    guard = getattr(handler.provision, "guard", None)
    if guard is not None and synced:    # what its watches list first
        sync(handler)
    return handler


def sync(handler: NeutronPortHandler) -> None:
    """What the guard's watches list first."""
    guard = getattr(handler.provision, "guard", None)
    if guard is not None:
        for kind, source in guard.sources():
            items, _ = source.list("0")
            guard.book.replace(kind, items)


def listed(handler: NeutronPortHandler) -> None:
    """The handler's first list of the pods (decoded as its watch does)."""
    guard = getattr(handler.provision, "guard", None)
    source = ClusterPods(handler.client) if guard is None else \
        ClusterPods(handler.client, decode=guard.decode)
    pods, rv = source.list("0")
    handler.replace_all(pods, rv)


def groups_made(world: World) -> None:
    """The policy handler's pass, then it stops."""
    running = world.start()
    world.settle(running)
    world.stop()


def pod_port(world: World, pod: dict[str, Any]) -> dict[str, Any]:
    [port] = world.cloud.ports(device_id=pod["metadata"]["uid"])
    return port


def wanted_ids(world: World, pod: dict[str, Any]) -> set[str]:
    names = model.port_groups(spec.pod(pod), [spec.policy(p) for p in
                                              world.api.networkpolicies.values()],
                              world.naming)
    assert names is not None
    groups = world.groups()
    return {groups[n]["id"] for n in names}


def clients_group(world: World) -> dict[str, Any]:
    """The address group of the policy's one peer (its clients)."""
    [group] = [g for name, g in world.address_groups().items()
               if name.startswith(f"{world.tag}:ag:")]
    return group


def podports_from(world: World, since: float) -> float:
    """When the first PodPort was written after ``since`` (wall time, the
    fake Neutron's clock; the fake API's is monotonic)."""
    offset = time.time() - time.monotonic()
    return min(at + offset for at, m, p, _ in list(world.api.requests)
               if m in ("POST", "PUT", "PATCH") and p.startswith(PODPORTS)
               and at + offset >= since)


def neutron_at(world: World, method: str, path: str) -> list[float]:
    return [t for t, m, p, _ in world.cloud.neutron_access()
            if m == method and p.startswith(path)]


def test_a_selected_pods_port_is_made_in_its_groups_and_its_peers_join(
        world: World) -> None:
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    groups_made(world)
    handler = port_handler(world, "neutron_port", "network_policy")
    web = world.pod("shop", "web-1", WEB, port=False)
    client = world.pod("shop", "client-1", CLIENT, port=False)
    since = time.time()
    listed(handler)
    assert world.api.podports.keys() >= {("shop", "web-1"), ("shop",
                                                              "client-1")}
    web_port, client_port = pod_port(world, web), pod_port(world, client)
    assert set(web_port["security_groups"]) == wanted_ids(world, web)
    # ... the selected pods' marker among them, from the create: the
    # default group admits it (the pods no policy selects stay reached).
    marker = world.groups()[world.naming.own("selected")]["id"]
    assert marker in web_port["security_groups"]
    default = world.cloud.neutron.security_groups[world.cloud.project_id]
    assert client_port["security_groups"] == [default]   # not selected
    client_ip = client_port["fixed_ips"][0]["ip_address"]
    assert clients_group(world)["addresses"] == [f"{client_ip}/32"]
    # One create (both pods, their groups per port), one address call,
    # then the PodPorts.
    creates = [t for t in neutron_at(world, "POST", "/v2.0/ports")
               if t >= since]
    joins = [t for t in neutron_at(world, "PUT", "/v2.0/address-groups/")
             if t >= since]
    assert len(creates) == 1 and len(joins) == 1
    assert neutron_at(world, "PUT", "/v2.0/ports/") == []
    assert creates[0] < joins[0] < podports_from(world, since)
    # The policy handler's restart finds all of it right, though the
    # pods' status says no address yet: it writes nothing.
    since = time.time()
    running = world.start()
    world.settle(running)
    assert world.writes(since) == []
    assert clients_group(world)["addresses"] == [f"{client_ip}/32"]


def pools_filled(world: World, stopping: threading.Event,
                 resident: dict[str, str]) -> NeutronPortHandler:
    """A port handler whose node runs a pod labelled ``resident`` (one
    the policy selects: the node keeps a closed pool too), its pools
    filled."""
    for key, value in (("enabled", True), ("ports_pool_min", 3),
                       ("ports_pool_max", 6), ("ports_pool_batch", 3),
                       ("ports_pool_update_frequency", 0.2)):
        world.conf.set_override(key, value, "vif_pool")
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    groups_made(world)
    handler = port_handler(world, "neutron_port", "network_policy")
    world.pod("shop", "resident", resident, port=False)
    listed(handler)
    handler.refill.start(stopping)
    closed = resident == WEB
    wait_for(lambda: len(handler.pools.of("node-a").free) >= 3 and (
        not closed or len(handler.pools.of("node-a", closed=True).free) >= 3))
    return handler


def test_a_pool_port_is_claimed_in_its_groups_in_one_put(
        pooled: World) -> None:
    """No selected pod on the node: no closed pool; a selected pod takes
    a port in the default group, claimed in its groups before its
    PodPort."""
    world = pooled
    stopping = threading.Event()
    handler = pools_filled(world, stopping, {})
    try:
        assert handler.pools.of("node-a", closed=True).free == {}
        pool_ids = set(handler.pools.of("node-a").free)
        web = world.pod("shop", "web-1", WEB, port=False)
        client = world.pod("shop", "client-1", CLIENT, port=False)
        since = time.time()
        guard = getattr(handler.provision, "guard", None)
        for obj in (web, client):
            handler.upsert(cluster_pod(obj) if guard is None
                           else guard.decode(obj))
        window_ends(handler)
        handler.tick()
        wait_for(lambda: world.cloud.ports(device_id=client["metadata"][
            "uid"]) != [])          # its claim, in the background
        web_port = pod_port(world, web)
        assert web_port["id"] in pool_ids
        assert set(web_port["security_groups"]) == wanted_ids(world, web)
        puts = [t for t in neutron_at(world, "PUT",
                                      f"/v2.0/ports/{web_port['id']}")
                if t >= since]
        assert len(puts) == 1           # the claim: its groups in it
        offset = time.time() - time.monotonic()
        assert puts[0] < world.api.podport_times[("shop", "web-1")] + offset
        client_ip = pod_port(world, client)["fixed_ips"][0]["ip_address"]
        assert clients_group(world)["addresses"] == [f"{client_ip}/32"]
        joins = [t for t in neutron_at(world, "PUT", "/v2.0/address-groups/")
                 if t >= since]
        assert len(joins) == 1 and joins[0] < podports_from(world, since)
    finally:
        stopping.set()
        handler.pools.stop()


def arrives(handler: NeutronPortHandler, pod: dict[str, Any]) -> None:
    """The pod's watch event, then the batch window ends."""
    guard = handler.provision.guard
    assert guard is not None
    handler.upsert(guard.decode(pod))
    window_ends(handler)
    handler.tick()


def test_a_selected_pod_takes_a_closed_pool_port_claimed_in_the_background(
        pooled: World) -> None:
    """A node that runs a pod a policy selects keeps a closed pool (ports
    in no group); the next selected pod takes one: its PodPort is written
    without waiting for the claim, which gives the port its groups."""
    world = pooled
    stopping = threading.Event()
    try:
        handler = pools_filled(world, stopping, WEB)
        closed_ids = set(handler.pools.of("node-a", closed=True).free)
        for pid in closed_ids:
            port = world.cloud.neutron.ports[pid]
            assert port["security_groups"] == []
            assert port["binding:host_id"] == "node-a"
            assert port["name"] == f"{world.tag}:pool-closed"
        world.cloud.neutron.update_delay = 0.5
        web = world.pod("shop", "web-1", WEB, port=False)
        since = time.time()
        arrives(handler, web)
        key = ("shop", "web-1")
        wait_for(lambda: key in world.api.podport_times)
        # Until its claim is answered, the port is still a pool port.
        wait_for(lambda: [set(p["security_groups"]) for p in
                          world.cloud.ports(device_id=web["metadata"]["uid"])]
                 == [wanted_ids(world, web)])
        web_port = pod_port(world, web)
        assert web_port["id"] in closed_ids
        [put] = [t for t in neutron_at(world, "PUT",
                                       f"/v2.0/ports/{web_port['id']}")
                 if t >= since]         # the claim: its groups in it
        offset = time.time() - time.monotonic()
        # The PodPort did not wait for the claim's answer.
        assert world.api.podport_times[key] + offset < put + 0.5
        assert handler.pools.of("node-a", closed=True).hits == 1
        handler.pools.stop()
    finally:
        stopping.set()


def test_a_closed_ports_claim_made_again_after_a_restart_sets_its_groups(
        pooled: World) -> None:
    """The claim of a selected pod's closed port fails until the handler
    restarts: the new one, finding the PodPort naming the port, claims it
    again with the pod's groups (not only its device)."""
    world = pooled
    stopping = threading.Event()
    try:
        handler = pools_filled(world, stopping, WEB)
        world.cloud.neutron.fail_updates.update(
            handler.pools.of("node-a", closed=True).free)
        web = world.pod("shop", "web-1", WEB, port=False)
        arrives(handler, web)
        wait_for(lambda: ("shop", "web-1") in world.api.podport_times)
        stopping.set()
        handler.pools.stop()                    # the handler stops
        assert world.cloud.ports(device_id=web["metadata"]["uid"]) == []
        world.cloud.neutron.fail_updates.clear()
        again = port_handler(world, "neutron_port", "network_policy")
        listed(again)                           # its first resync
        wait_for(lambda: [set(p["security_groups"]) for p in
                          world.cloud.ports(device_id=web["metadata"]["uid"])]
                 == [wanted_ids(world, web)])
        again.pools.stop()
    finally:
        stopping.set()


def test_a_selected_pods_vanished_port_comes_back_in_its_groups(
        world: World) -> None:
    """A bound pod's port an admin deleted is made again in its policies'
    groups, not in the default group (the policy handler's next pass is
    up to a full look away)."""
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    groups_made(world)
    handler = port_handler(world, "neutron_port", "network_policy")
    web = world.pod("shop", "web-1", WEB, port=False)
    listed(handler)
    old = pod_port(world, web)
    assert set(old["security_groups"]) == wanted_ids(world, web)
    world.api.client().podports.patch("web-1", {"status": {
        "boundAt": "2026-11-26T00:00:00Z"}}, namespace="shop",
        subresource="status")
    with world.cloud.neutron.lock:
        world.cloud.neutron._remove(old["id"])      # an admin deleted it
    handler.resync(set(handler.book.pods))
    new = pod_port(world, web)
    assert new["id"] != old["id"]
    assert new["fixed_ips"] == old["fixed_ips"]
    assert set(new["security_groups"]) == wanted_ids(world, web)


def test_a_group_not_made_yet_gives_no_group_not_the_defaults(
        world: World) -> None:
    """The policy handler has not passed: the port is made at once in no
    group (it admits nothing), its PodPort written; the policy handler's
    pass gives it its groups."""
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    handler = port_handler(world, "neutron_port", "network_policy")
    web = world.pod("shop", "web-1", WEB, port=False)
    listed(handler)
    assert ("shop", "web-1") in world.api.podports
    assert pod_port(world, web)["security_groups"] == []
    world.ports[web["metadata"]["uid"]] = pod_port(world, web)["id"]
    groups_made(world)
    assert set(pod_port(world, web)["security_groups"]) == \
        wanted_ids(world, web)


def test_a_port_in_no_group_whose_policy_went_gets_the_defaults(
        world: World) -> None:
    """Its policy deleted before the policy handler passed: the port goes
    back to the default groups (a port in no group is the handler's)."""
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    handler = port_handler(world, "neutron_port", "network_policy")
    web = world.pod("shop", "web-1", WEB, port=False)
    listed(handler)
    assert pod_port(world, web)["security_groups"] == []
    world.api.delete_networkpolicy("shop", "from-clients")
    running = world.start()
    defaults = world.cloud.neutron.security_groups
    wait_for(lambda: pod_port(world, web)["security_groups"] == [
        defaults.get(world.cloud.project_id)])
    world.settle(running)


def test_a_pod_waits_until_the_policies_are_listed(world: World) -> None:
    """Before its watches have listed the policies and namespaces, the
    port handler makes no port (it cannot say its groups): the pod waits
    for the next round, then gets its port in its groups."""
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    groups_made(world)
    handler = port_handler(world, "neutron_port", "network_policy",
                           synced=False)
    web = world.pod("shop", "web-1", WEB, port=False)
    listed(handler)
    assert world.cloud.ports(device_id=web["metadata"]["uid"]) == []
    assert ("shop", "web-1") not in world.api.podports
    assert web["metadata"]["uid"] in handler.retries.pending
    sync(handler)
    handler.resync(set(handler.retries.pending))    # the retry round
    assert ("shop", "web-1") in world.api.podports
    assert set(pod_port(world, web)["security_groups"]) == \
        wanted_ids(world, web)


def test_without_the_policy_handler_nothing_more_is_asked(
        world: World) -> None:
    """Only neutron_port: no guard, NetworkPolicies or not; the same
    reads and writes as ever (one port list, one create), the ports in
    the default group."""
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    handler = port_handler(world, "neutron_port")
    assert getattr(handler.provision, "guard", None) is None
    web = world.pod("shop", "web-1", WEB, port=False)
    since = time.time()
    started = time.monotonic()
    listed(handler)
    calls = sorted((m, p.split("/")[2]) for t, m, p, _ in
                   world.cloud.neutron_access() if t >= since)
    assert not [c for c in calls if c[1] in ("security-groups",
                                             "address-groups")]
    assert [c for c in calls if c[0] != "GET"] == [("POST", "ports")]
    default = world.cloud.neutron.security_groups[world.cloud.project_id]
    assert pod_port(world, web)["security_groups"] == [default]
    asked = {p for at, _, p, _ in list(world.api.requests) if at >= started}
    assert not any("networkpolicies" in p or p.endswith("/namespaces")
                   for p in asked)
