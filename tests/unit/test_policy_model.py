"""The policy model's parts: selectors in canonical form, ipBlock minus
except as CIDRs, hostile objects, shared address groups, rules constant
in the number of pods, named ports, the groups of a pod's port."""
from __future__ import annotations

import ipaddress
import random

from kuryr_supervisor.controller.policy import spec
from kuryr_supervisor.controller.policy.cidrs import remaining
from kuryr_supervisor.controller.policy.desired import (
    Infrastructure,
    address_groups_of,
    desired,
    port_groups,
)
from kuryr_supervisor.controller.policy.naming import Naming
from kuryr_supervisor.controller.policy.rules import policy_rules
from kuryr_supervisor.controller.policy.selectors import selector
from tests.fixtures.netpol.objects import labels, namespace, pod, policy

NAMING = Naming("kuryr-supervisor:c1")
NSS = [spec.namespace(namespace("a", team="a")),
       spec.namespace(namespace("b", team="b"))]
BY_NS = {n.name: n for n in NSS}


def pods(count: int, app: str = "web", port: int = 80) -> list[spec.Pod]:
    return [spec.pod(pod("a", f"{app}-{i}", f"10.2.{i // 250}.{i % 250 + 1}",
                         {"app": app}, [("http", port)])) for i in range(count)]


def test_selectors_that_mean_the_same_are_one() -> None:
    one = selector(labels(app="web", tier="x"))
    two = selector({"matchExpressions": [
        {"key": "tier", "operator": "In", "values": ["x", "x"]},
        {"key": "app", "operator": "In", "values": ["web"]}]})
    assert one == two and one.canonical() == two.canonical()
    assert selector({}) == selector(None) and selector({}).everything
    assert selector(labels(app="db")) != one


def test_invalid_selectors_match_nothing_and_never_raise() -> None:
    for bad in ([], "x", {"matchLabels": {"a": 1}},
                {"matchExpressions": [{"key": "a", "operator": "Like"}]},
                {"matchExpressions": [{"key": "a", "operator": "In"}]},
                {"matchExpressions": [{"key": "a", "operator": "Exists",
                                       "values": ["x"]}]},
                {"matchExpressions": [{"key": "a", "operator": ["In"]}]}):
        sel = selector(bad)
        assert not sel.valid and not sel.matches({"a": "x"}), bad


def test_ipblock_except_as_covering_cidrs() -> None:
    assert len(remaining("10.0.0.0/16", ["10.0.5.0/24"])) == 8
    left = remaining("10.0.0.0/24", ["10.0.0.16/28", "10.0.0.200/32"])
    nets = [ipaddress.ip_network(n) for n in left]
    for i in range(256):
        addr = ipaddress.ip_address(f"10.0.0.{i}")
        inside = any(addr in n for n in nets)
        assert inside is not (16 <= i < 32 or i == 200), i
    assert remaining("10.0.0.0/24", ["10.0.0.0/16"]) == ()
    assert remaining("10.0.0.0/24", ["10.9.0.0/16", "::/0"]) == ("10.0.0.0/24",)
    assert remaining("10.0.0.1/24", []) == ("10.0.0.0/24",)


def test_hostile_objects_never_raise() -> None:
    rng = random.Random(7)
    junk: list[object] = [None, 1, "x", [], {}, [1], {"a": None}, True, -5,
                          {"port": "x" * 99}, {"cidr": "999.0.0.0/8"}]
    for _ in range(500):
        obj = {"metadata": rng.choice(junk), "spec": {
            k: rng.choice(junk) for k in ("podSelector", "policyTypes")}}
        obj["spec"]["ingress"] = [{"from": [rng.choice(junk)],
                                   "ports": [rng.choice(junk)]}]
        obj["spec"]["egress"] = [{"to": [{"ipBlock": rng.choice(junk)}]}]
        made = spec.policy(obj)
        policy_rules(made, pods(2), BY_NS, NAMING)
        spec.pod({"spec": {"containers": [{"ports": [rng.choice(junk)]}]},
                  "status": rng.choice(junk)})


def test_an_invalid_port_or_peer_matches_nothing_rather_than_everything() -> None:
    for rule in ({"ports": [{"port": 80, "protocol": "ICMP"}]},
                 {"ports": [{"port": 70000}]},
                 {"ports": [{"port": 90, "endPort": 80}]},
                 {"from": [{"podSelector": {}, "ipBlock": {"cidr": "1.0.0.0/8"}}]},
                 {"from": [{}]}):
        made = spec.policy(policy("a", "p", ingress=[rule]))
        assert policy_rules(made, pods(2), BY_NS, NAMING).main == frozenset(), rule


def test_policy_types_default_as_the_api() -> None:
    assert spec.policy(policy("a", "p")).types == {"Ingress"}
    assert spec.policy(policy("a", "p", egress=[])).types == {"Ingress"}
    assert spec.policy(policy("a", "p", egress=[{}])).types == {"Ingress", "Egress"}
    assert spec.policy(policy("a", "p", egress=[{}], types=["Egress"])).types \
        == {"Egress"}


def test_a_group_holds_the_rules_of_its_types_only() -> None:
    made = spec.policy(policy("a", "p", ingress=[{}], egress=[{}],
                              types=["Ingress"]))
    rules = policy_rules(made, pods(2), BY_NS, NAMING).main
    assert {r.direction for r in rules} == {"ingress"}


PEER = {"namespaceSelector": labels(team="a"), "podSelector": labels(app="web")}
SPELLED = {"podSelector": {"matchExpressions": [
    {"key": "app", "operator": "In", "values": ["web"]}]},
    "namespaceSelector": {"matchExpressions": [
        {"key": "team", "operator": "In", "values": ["a"]}]}}


def test_two_policies_with_the_same_peer_share_one_address_group() -> None:
    pols = [spec.policy(policy("a", "one", ingress=[{"from": [PEER]}])),
            spec.policy(policy("b", "two", egress=[{"to": [SPELLED]}]))]
    want = desired(pols, pods(3), NSS, NAMING)
    named = {r.remote_address_group for g in want.groups.values()
             for r in g.rules if r.remote_address_group}
    assert len(named - {NAMING.own("canaries")}) == 1
    # A podSelector alone means the policy's own namespace: two groups.
    alone = [spec.policy(policy(ns, "p", ingress=[{"from": [
        {"podSelector": labels(app="web")}]}])) for ns in ("a", "b")]
    assert len(desired(alone, pods(3), NSS, NAMING).address_groups) == 3


def test_rules_stay_the_same_however_many_pods_peers_select() -> None:
    pol = spec.policy(policy("a", "p", labels(app="db"), ingress=[
        {"from": [PEER, {"ipBlock": {"cidr": "10.0.0.0/8",
                                     "except": ["10.2.0.0/16"]}}],
         "ports": [{"port": 5432}, {"port": 9000, "endPort": 9100}]}],
        egress=[{"to": [{"podSelector": labels(app="web")}],
                 "ports": [{"port": "http"}]}]))
    seen = set()
    for count in (10, 50, 100):
        world = [*pods(count), *pods(3, "db", 5432)]
        want = desired([pol], world, NSS, NAMING)
        rules = sum(len(g.rules) for g in want.groups.values())
        seen.add((rules, len(want.groups), len(want.address_groups)))
        members = {len(a.addresses) for a in want.address_groups.values()}
        assert count in members
    assert len(seen) == 1, seen


def test_named_ports_split_per_number_not_per_pod() -> None:
    world = [*pods(5, "web", 80), *pods(4, "api", 8080)]
    ingress = spec.policy(policy("a", "in", {}, ingress=[{"ports": [
        {"port": "http"}]}]))
    want = desired([ingress], world, NSS, NAMING)
    variants = [g for n, g in want.groups.items()
                if n.startswith(NAMING.policy("np-a-in") + ":")]
    assert sorted(r.port_range_min for g in variants for r in g.rules) == [80, 8080]
    web, api = want.ports[("a", "web-0")], want.ports[("a", "api-0")]
    assert len(set(web) ^ set(api)) == 2     # each its own variant
    egress = spec.policy(policy("b", "out", {}, egress=[{"ports": [
        {"port": "http"}]}]))
    rules = desired([egress], world, NSS, NAMING).groups[
        NAMING.policy("np-b-out")].rules
    assert sorted(r.port_range_min for r in rules) == [80, 8080]
    to_api = spec.policy(policy("b", "api", {}, egress=[{
        "to": [{"namespaceSelector": {}, "podSelector": labels(app="api")}],
        "ports": [{"port": "http"}]}]))
    rules = desired([to_api], world, NSS, NAMING).groups[
        NAMING.policy("np-b-api")].rules
    assert [r.port_range_min for r in rules] == [8080]


def test_the_groups_of_a_pod_port() -> None:
    web = spec.pod(pod("a", "w", "10.2.0.1", {"app": "web"}, node="n1"))
    ingress = spec.policy(policy("a", "i", labels(app="web"), types=["Ingress"]))
    egress = spec.policy(policy("a", "e", labels(app="web"), types=["Egress"]))
    other = spec.policy(policy("b", "o", {}, types=["Ingress", "Egress"]))
    assert port_groups(web, [other], NAMING) is None
    only_in = port_groups(web, [ingress, other], NAMING)
    assert only_in == tuple(sorted((
        NAMING.policy("np-a-i"), NAMING.own("base"), NAMING.node("n1"),
        NAMING.own("open-egress"), NAMING.own("selected"))))
    both = port_groups(web, [ingress, egress], NAMING) or ()
    assert NAMING.own("open-egress") not in both
    assert NAMING.own("open-ingress") not in both
    assert NAMING.own("open-ingress") in (port_groups(web, [egress], NAMING)
                                          or ())


def test_the_handlers_own_groups_and_the_quota_formula() -> None:
    """Groups: policies + their variants + 4 of the handler's own + one a
    node; address groups: distinct peer sets + the canaries'; rules in the
    default group: one a family, from the ``selected`` marker (which has
    none), whose members are the pods a policy selects."""
    pols = [spec.policy(policy("a", f"p{i}", ingress=[{"from": [PEER]}]))
            for i in range(4)]
    infra = Infrastructure({"n1": ("192.168.0.1",), "n2": ("192.168.0.2",)},
                           ("10.9.0.1",))
    want = desired(pols, pods(20), NSS, NAMING, infrastructure=infra)
    assert len(want.groups) == 4 + 0 + 4 + 2
    marker = NAMING.own("selected")
    assert want.groups[marker].rules == frozenset()
    assert {(r.direction, r.ethertype, r.protocol, r.remote_group)
            for r in want.default_rules} == {("ingress", "IPv4", None, marker)}
    assert all(marker in names for names in want.ports.values())
    assert len(want.ports) == 20
    dual = desired(pols, pods(2), NSS, NAMING, families=("IPv4", "IPv6"))
    assert {r.ethertype for r in dual.default_rules} == {"IPv4", "IPv6"}
    assert len(want.address_groups) == 1 + 1
    assert want.address_groups[NAMING.own("canaries")].addresses == \
        {"10.9.0.1/32"}
    node = want.groups[NAMING.node("n1")]
    assert {(r.direction, r.remote_ip_prefix) for r in node.rules} == {
        ("ingress", "192.168.0.1/32"), ("egress", "192.168.0.1/32")}


def test_names_and_tags() -> None:
    name = NAMING.policy("0a1b-2c")
    assert NAMING.uid_of(name) == "0a1b-2c"
    assert NAMING.uid_of(NAMING.policy("0a1b-2c", "ff00")) == "0a1b-2c"
    assert NAMING.uid_of("kuryr-supervisor:other:np:0a1b") == ""
    assert NAMING.tags == ("kuryr-supervisor:c1", "kuryr-supervisor:policy")
    assert len(NAMING.node("n" * 253)) < 255


def test_the_address_groups_a_new_pod_belongs_in() -> None:
    pols = [spec.policy(policy("a", "one", ingress=[{"from": [PEER]}])),
            spec.policy(policy("a", "two", egress=[{"to": [
                {"podSelector": labels(app="web")}]}]))]
    want = desired(pols, pods(3), NSS, NAMING)
    new = spec.pod(pod("a", "new", "10.2.9.9", {"app": "web"}))
    mine = address_groups_of(new, want.address_groups.values(), BY_NS)
    assert len(mine) == 2
    again = desired(pols, [*pods(3), new], NSS, NAMING)
    assert {n for n, g in again.address_groups.items()
            if "10.2.9.9/32" in g.addresses} == set(mine)
    assert again.groups == want.groups    # no rule changes
    other = spec.pod(pod("b", "x", "10.3.0.1", {"app": "web"}))
    assert address_groups_of(other, want.address_groups.values(), BY_NS) == []
