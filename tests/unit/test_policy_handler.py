"""The network_policy handler against the fake Kubernetes API and the fake
Neutron (tests/fixtures/policyhandler.py): NetworkPolicies become
security groups whose rules name address groups, and the pods' ports
carry them, as the model asks (compared by names with what the model
makes of the API's objects); a restart writes nothing; what was deleted
while no handler ran is swept; the races that broke Kuryr leave nothing
and no error loop; per-policy Events and figures."""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import policyhandler
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.fakecloud import FakeCloud
from tests.fixtures.policyhandler import World

WEB = {"app": "web"}
DENY_ALL = {"podSelector": {}, "policyTypes": ["Ingress"]}
FROM_CLIENTS = {"podSelector": {"matchLabels": WEB},
                "ingress": [{"from": [{"podSelector": {"matchLabels": {
                    "role": "client"}}}], "ports": [{"port": 80}]}]}
EGRESS_DNS = {"podSelector": {"matchLabels": WEB},
              "policyTypes": ["Egress"],
              "egress": [{"to": [{"namespaceSelector": {"matchLabels": {
                  "team": "ops"}}}], "ports": [{"port": 53,
                                                "protocol": "UDP"}]}]}


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    api = FakeAPI().start()
    yield api
    api.stop()


@pytest.fixture
def world(api: FakeAPI, fake_cloud: FakeCloud,
          tmp_path: Path) -> Iterator[World]:
    yield from policyhandler.world(api, fake_cloud, tmp_path)


def _cluster(world: World) -> None:
    world.api.add_namespace("shop", {"team": "shop"})
    world.api.add_namespace("ops", {"team": "ops"})
    world.pod("shop", "web-1", WEB)
    world.pod("shop", "web-2", WEB)
    world.pod("shop", "client-1", {"role": "client"})
    world.pod("ops", "dns-1", {"app": "dns"})


def test_policies_converge_from_scratch(world: World) -> None:
    _cluster(world)
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    world.api.put_networkpolicy("ops", "deny-all", DENY_ALL)
    world.api.put_networkpolicy("shop", "dns", EGRESS_DNS)
    running = world.start()
    world.converged()
    world.settle(running)
    groups = world.groups()
    # Neutron's own "allow all egress" rules are gone from the policies'
    # groups (only open-egress admits every egress).
    for name, group in groups.items():
        if ":np:" in name:
            assert not any(r["direction"] == "egress" and
                           not r.get("remote_ip_prefix") and
                           not r.get("remote_address_group_id")
                           for r in group["security_group_rules"]), name
    assert len(world.events("PolicyApplied")) == 3
    assert world.state.policies.read()["policies_applied"] == 3


def test_changes_converge_and_a_pod_joining_costs_one_call(
        world: World) -> None:
    _cluster(world)
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    running = world.start()
    world.converged()
    world.settle(running)
    since = time.time()
    client = world.pod("shop", "client-2", {"role": "client"})
    world.converged()
    world.settle(running)
    writes = world.writes(since)
    # The new client joins the clients' address group: one call (its own
    # port keeps its default groups: no policy selects it).
    assert writes == [("PUT", f"/v2.0/address-groups/{ag}/add_addresses")
                      for ag in [writes[0][1].split("/")[3]]], writes
    # Relabelled into the selected set: its port gets the groups; out of
    # the clients' set: one call.
    since = time.time()
    world.relabel("shop", "client-2", WEB)
    world.converged()
    world.settle(running)
    kinds = sorted((m, p.split("/")[2]) for m, p in world.writes(since))
    assert kinds == [("PUT", "address-groups"), ("PUT", "ports")], kinds
    # Namespace relabel, policy update and delete.
    world.api.put_networkpolicy("shop", "dns", EGRESS_DNS)
    world.api.add_namespace("ops", {"team": "other"})
    world.converged()
    world.api.put_networkpolicy("shop", "dns", dict(
        EGRESS_DNS, egress=[{"ports": [{"port": 5353, "protocol": "UDP"}]}]))
    world.converged()
    world.api.delete_networkpolicy("shop", "dns")
    world.api.delete_networkpolicy("shop", "from-clients")
    world.converged()
    assert client["metadata"]["uid"] in world.ports
    assert world.groups() == {} and world.address_groups() == {}


def test_a_restart_writes_nothing(world: World) -> None:
    _cluster(world)
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    world.api.put_networkpolicy("shop", "dns", EGRESS_DNS)
    first = world.start()
    world.converged()
    world.settle(first)
    first.stop()
    told = len(world.events("PolicyApplied"))
    since = time.time()
    second = world.start()
    world.settle(second)
    assert second.handler.reconciler.last is not None
    assert world.writes(since) == []
    world.converged()
    # ... nor tells again what was said.
    assert told == 2 and len(world.events("PolicyApplied")) == told


def test_what_was_deleted_while_down_is_swept(world: World) -> None:
    _cluster(world)
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    world.api.put_networkpolicy("shop", "dns", EGRESS_DNS)
    first = world.start()
    world.converged()
    world.settle(first)
    first.stop()
    world.api.delete_networkpolicy("shop", "dns")
    world.delete_pod("shop", "client-1")
    second = world.start()
    world.converged()
    world.settle(second)
    names = set(world.groups())
    assert not any(n.endswith(":np:") for n in names)
    world.api.delete_networkpolicy("shop", "from-clients")
    world.converged()
    assert world.groups() == {} and world.address_groups() == {}


def test_two_policies_deleted_at_once(world: World) -> None:
    _cluster(world)
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    world.api.put_networkpolicy("shop", "deny-all", DENY_ALL)
    running = world.start()
    world.converged()
    world.settle(running)
    with world.api.cond:
        world.api.delete_networkpolicy("shop", "from-clients")
        world.api.delete_networkpolicy("shop", "deny-all")
    world.converged()
    world.settle(running)
    assert world.groups() == {} and world.address_groups() == {}
    assert world.failures == 0


def test_a_policy_deleted_while_its_pods_are_relabelled(world: World) -> None:
    _cluster(world)
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    running = world.start()
    world.converged()
    world.settle(running)
    with world.api.cond:
        world.relabel("shop", "web-1", {"app": "old"})
        world.relabel("shop", "client-1", WEB)
        world.api.delete_networkpolicy("shop", "from-clients")
        world.relabel("shop", "web-2", {"role": "client"})
    world.converged()
    world.settle(running)
    assert world.groups() == {} and world.address_groups() == {}
    assert world.events("PolicyFailed") == []


def test_a_namespace_deleted_with_its_policies(world: World) -> None:
    _cluster(world)
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    world.api.put_networkpolicy("shop", "deny-all", DENY_ALL)
    world.api.put_networkpolicy("ops", "deny-all", DENY_ALL)
    running = world.start()
    world.converged()
    world.settle(running)
    uids = [p["metadata"]["uid"] for k, p in world.api.pods.items()
            if k[0] == "shop"]
    world.api.delete_namespace("shop")
    for uid in uids:        # the port handler deletes their ports
        world.cloud.admin("DELETE", f"/v2.0/ports/{world.ports.pop(uid)}")
    world.converged()
    world.settle(running)
    assert not any(":np:" in n and n.endswith(u) for n in world.groups()
                   for u in uids)
    world.api.delete_namespace("ops")
    world.converged()
    assert world.groups() == {} and world.address_groups() == {}
    assert world.events("PolicyFailed") == []


def test_a_pod_whose_port_comes_later(world: World) -> None:
    """A selected pod whose port the port handler has not made yet waits
    (its policy pending), then gets its groups once the port exists."""
    _cluster(world)
    late = world.pod("shop", "web-3", WEB, port=False)
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    running = world.start()
    world.converged()
    rec = running.handler.reconciler
    policyhandler.wait(0.5)
    assert rec.last is not None and rec.last.pending
    world.port_made(late)
    world.converged()
    world.settle(running)


def test_a_met_quota_fails_the_policy_then_it_converges(
        world: World) -> None:
    _cluster(world)
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    running = world.start()
    world.converged()
    world.settle(running)
    project = world.cloud.project_id
    quota = world.cloud.neutron.groups.rule_quota(project)
    world.cloud.neutron.groups.rule_limits[project] = quota["used"]
    world.api.put_networkpolicy("shop", "dns", EGRESS_DNS)
    policyhandler.wait_for(lambda: world.events("PolicyFailed"))
    [event] = world.events("PolicyFailed")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "NetworkPolicy"
    assert event["involvedObject"]["name"] == "dns"
    assert "quota" in event["message"]
    assert world.state.policies.neutron_state() == "refusing"
    figures = world.state.policies.read()
    assert figures["policies_failed"] == 1
    assert figures["policies_applied"] == 1
    assert world.failures == 0
    world.cloud.neutron.groups.rule_limits[project] = 100
    world.converged()
    world.settle(running)
    assert world.state.policies.neutron_state() == "ok"
    assert {e["involvedObject"]["name"]
            for e in world.events("PolicyApplied")} == {"from-clients", "dns"}
    assert len(world.events("PolicyFailed")) == 1


def test_neutron_down_then_back(world: World) -> None:
    _cluster(world)
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    running = world.start()
    world.converged()
    world.settle(running)
    world.cloud.neutron.stop()
    try:
        world.api.put_networkpolicy("shop", "dns", EGRESS_DNS)
        policyhandler.wait_for(
            lambda: world.state.policies.neutron_state() == "down")
        policyhandler.wait_for(lambda: world.events("PolicyPending"))
        assert world.state.policies.read()["policies_pending"] == 2
        assert world.failures == 0
    finally:
        world.cloud.neutron.start()
    world.converged(timeout=30)
    world.settle(running, timeout=30)
    assert world.state.policies.neutron_state() == "ok"
    assert world.failures == 0


def test_the_port_handlers_hook_gives_a_new_pods_groups(
        world: World) -> None:
    """What the port handler will make a new pod's port with: the groups
    the handler then sets on it (None for a pod no policy selects)."""
    from kuryr_supervisor.controller.policy import hook
    _cluster(world)
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    policies = list(world.api.networkpolicies.values())
    new = {"metadata": {"namespace": "shop", "name": "web-9",
                        "labels": WEB},
           "spec": {"nodeName": "node-a"}}
    with pytest.raises(hook.NotMadeYet):
        hook.new_port_groups(world.neutron, world.naming, new, policies)
    running = world.start()
    world.converged()
    world.settle(running)
    groups = hook.new_port_groups(world.neutron, world.naming, new, policies)
    pod = world.pod("shop", "web-9", WEB)
    world.converged()
    assert groups is not None
    assert set(groups) == world.port_groups(pod["metadata"]["uid"])
    other = dict(new, metadata={"namespace": "shop", "name": "x"})
    assert hook.new_port_groups(world.neutron, world.naming, other,
                                policies) is None


def test_a_finished_pod_leaves_its_sets(world: World) -> None:
    """A pod that ran to completion is as if gone: its address leaves the
    address groups (another pod may get it), and its policy is applied,
    not waiting for its port."""
    _cluster(world)
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    running = world.start()
    world.converged()
    world.settle(running)
    client = world.api.pods[("shop", "client-1")]
    address = client["status"]["podIP"]
    world.api.set_phase("shop", "client-1", "Succeeded")
    policyhandler.wait_for(lambda: not any(
        f"{address}/32" in g["addresses"]
        for g in world.address_groups().values()))
    world.settle(running)


def test_a_group_whose_tag_call_was_lost_is_adopted_a_duplicate_deleted(
        world: World) -> None:
    """A leader killed between a group's create and its tag call left it
    untagged (found by its description, tagged, used); one killed after a
    create whose answer was lost, then made again, left two of one name
    (one deleted)."""
    _cluster(world)
    policy = world.api.put_networkpolicy("shop", "deny-all", DENY_ALL)
    name = world.naming.policy(policy["metadata"]["uid"])
    admin = world.cloud.admin
    lost = admin("POST", policyhandler.GROUPS, {"security_group": {
        "name": name, "description": world.tag}}).expect(201)
    base = world.naming.own("base")
    twice = [admin("POST", policyhandler.GROUPS, {"security_group": {
        "name": base, "description": world.tag}}).expect(201)
        for _ in range(2)]
    for made in twice:
        admin("PUT", f"{policyhandler.GROUPS}/{made['security_group']['id']}"
              "/tags", {"tags": list(world.naming.tags)}).expect(200)
    running = world.start()
    world.converged()
    world.settle(running)
    groups = world.groups()
    assert groups[name]["id"] == lost["security_group"]["id"]
    assert groups[base]["id"] in {m["security_group"]["id"] for m in twice}
    every = admin("GET", policyhandler.GROUPS).expect(200)["security_groups"]
    assert sorted(g["name"] for g in every if g["name"] in (name, base)) == \
        sorted([name, base])


def test_a_group_on_a_port_whose_pod_is_gone_is_detached_then_deleted(
        world: World) -> None:
    """The pod deleted, its port not yet (the port handler's work), its
    policy deleted: the port is given the default groups first, so the
    group's delete is not refused (Neutron's SecurityGroupInUse)."""
    _cluster(world)
    world.api.put_networkpolicy("shop", "from-clients", FROM_CLIENTS)
    running = world.start()
    world.converged()
    world.settle(running)
    web = world.api.pods[("shop", "web-1")]
    port = world.ports[web["metadata"]["uid"]]
    world.api.delete_pod("shop", "web-1")
    world.api.delete_networkpolicy("shop", "from-clients")
    policyhandler.wait_for(lambda: world.groups() == {} and
                           world.address_groups() == {})
    got = world.cloud.admin("GET", f"/v2.0/ports/{port}").expect(200)
    assert [g for g in got["port"]["security_groups"]] == [
        world.neutron.security_groups(
            name="default", project_id=world.cloud.project_id)[0].id]
    assert world.events("PolicyFailed") == []


def _default_rules(world: World) -> list[dict]:
    """The rules of the project's default group naming one of ours."""
    default = world.neutron.security_groups(
        name="default", project_id=world.cloud.project_id)[0].id
    ours = {g["id"] for g in world.groups().values()}
    return [r for r in world.cloud.admin(
        "GET", "/v2.0/security-group-rules",
        security_group_id=default).expect(200)["security_group_rules"]
        if r.get("remote_group_id") in ours]


def _denied_and_marked(world: World) -> tuple[Any, dict[str, Any]]:
    """The cluster, one deny-all policy, the handler started and settled:
    the handler and its ``selected`` marker group."""
    _cluster(world)
    world.api.put_networkpolicy("shop", "deny-all", DENY_ALL)
    running = world.start()
    world.converged()
    world.settle(running)
    return running, world.groups()[world.naming.own("selected")]


def test_the_default_group_admits_the_pods_a_policy_selects(
        world: World) -> None:
    """A pod a policy selects leaves ``default``, which admits its own
    members only: the handler's ``selected`` marker, on every selected
    pod's port, is admitted by one rule in ``default``, so the selected
    pods still reach the pods no policy selects. Made once, a restart
    writes nothing, made again once deleted behind the handler's back,
    gone with the marker once no policy is left."""
    first, marker = _denied_and_marked(world)
    assert [r for r in marker["security_group_rules"]] == []
    for name in ("web-1", "web-2", "client-1"):
        uid = world.api.pods[("shop", name)]["metadata"]["uid"]
        assert marker["id"] in world.port_groups(uid), name
    dns = world.api.pods[("ops", "dns-1")]["metadata"]["uid"]
    assert marker["id"] not in world.port_groups(dns)
    [rule] = _default_rules(world)
    assert (rule["direction"], rule["ethertype"], rule["protocol"],
            rule["remote_group_id"]) == ("ingress", "IPv4", None,
                                         marker["id"])
    first.stop()
    since = time.time()
    second = world.start()
    world.settle(second)
    assert world.writes(since) == []
    world.cloud.admin("DELETE", "/v2.0/security-group-rules/"
                      f"{rule['id']}").expect(204)
    policyhandler.wait_for(lambda: len(_default_rules(world)) == 1)
    world.settle(second)
    policyhandler.wait(0.5)
    [again] = _default_rules(world)
    assert again["remote_group_id"] == marker["id"]
    world.api.delete_networkpolicy("shop", "deny-all")
    world.converged()
    assert world.groups() == {} and _default_rules(world) == []
    default = world.neutron.security_groups(
        name="default", project_id=world.cloud.project_id)[0].id
    assert not [r for r in world.cloud.admin(
        "GET", "/v2.0/security-group-rules", security_group_id=default,
        remote_group_id=marker["id"]).expect(200)["security_group_rules"]]


def test_a_node_that_registers_gets_its_group_before_any_pod_lands(
        world: World) -> None:
    """The nodes are watched: a node that registers while policies exist
    has its own group (its addresses, which its pods keep admitting) made
    before any pod is on it, so the first selected pod's port finds it
    made; an address that is not one is left out; a status update that
    changes nothing the model reads (a condition) makes no pass, and a
    changed address changes the group's rules."""
    _cluster(world)
    world.api.put_networkpolicy("shop", "deny-all", DENY_ALL)
    running = world.start()
    world.converged()
    world.settle(running)
    name = world.naming.node("node-b")
    assert name not in world.groups()
    world.api.add_node("node-b", addresses={"InternalIP": "192.0.2.20",
                                            "ExternalIP": "not-an-ip"})

    def rules() -> set[tuple[str, str]]:
        group = world.groups().get(name)
        return {(r["direction"], r["remote_ip_prefix"]) for r in
                group["security_group_rules"]} if group else set()
    # Made, then Neutron's own egress rules removed, within one pass.
    policyhandler.wait_for(lambda: rules() == {
        ("ingress", "192.0.2.20/32"), ("egress", "192.0.2.20/32")})
    world.settle(running)
    book = running.handler.book
    generation = book.snapshot().generation
    world.api.set_node_condition("node-b", {"type": "Ready",
                                            "status": "True"})
    policyhandler.wait(0.5)
    assert book.snapshot().generation == generation
    world.api.modify_node("node-b", addresses=[
        {"type": "InternalIP", "address": "192.0.2.21"}])
    policyhandler.wait_for(lambda: {
        r["remote_ip_prefix"] for r in world.groups()[name][
            "security_group_rules"]} == {"192.0.2.21/32"})


def test_the_node_ports_group_admits_the_pods_a_policy_selects(
        world: World) -> None:
    """Where the network_canary handler made the node ports' group
    (``<cluster tag>:nodes``, which admits ``default``'s members), the
    policy handler keeps the same rule in it as in ``default``: a pod a
    policy selects left ``default`` and still reaches the nodes' ports
    (its own egress as its policies say); a restart writes nothing."""
    made = world.neutron.create_security_group(
        name=world.naming.own("nodes"), project_id=world.cloud.project_id,
        description="the nodes' ports")
    first, marker = _denied_and_marked(world)

    def admitting() -> list[dict]:
        return [r for r in world.cloud.admin(
            "GET", "/v2.0/security-group-rules",
            security_group_id=made.id).expect(200)["security_group_rules"]
            if r.get("remote_group_id") == marker["id"]]
    policyhandler.wait_for(lambda: len(admitting()) == 1)
    [rule] = admitting()
    assert (rule["direction"], rule["ethertype"], rule["protocol"]) == (
        "ingress", "IPv4", None)
    first.stop()
    since = time.time()
    second = world.start()
    world.settle(second)
    assert world.writes(since) == []
    world.cloud.admin("DELETE", f"/v2.0/security-groups/{made.id}"
                      ).expect(204)
