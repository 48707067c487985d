"""The Node conditions the network judge publishes, replayed through
magnum-auto-healer's NodeCondition rule (tests/fixtures/autohealer.py, a
port of its code) with its defaults: a local fault gets that node, and
only it, repaired; a cluster-wide fault gets no node repaired.

The timelines come from the judge itself: the handler driven with records
over a fake clock against the fake API, every Node listed each 10 s of
that clock as the auto-healer would list them; each timeline is replayed
through both ways of wiring the rule."""
from __future__ import annotations

import copy
from typing import Any

import pytest

from kuryr_supervisor.netcheck.codecs import conditions as nc
from tests.fixtures.autohealer import AutoHealer, NodeConditionCheck
from tests.fixtures.netjudge import OWN, World, nodes_api, report, world_fixture

api = pytest.fixture(nodes_api)
world = pytest.fixture(world_fixture)

#: Our own type with the check's default ok-values ["True"], and
#: NetworkUnavailable with error-values ["True"]; unhealthy-duration (300
#: s), monitor-interval (60 s) and check-delay-after-add left at defaults.
HEALERS = (AutoHealer([NodeConditionCheck(types=(OWN,))]),
           AutoHealer([NodeConditionCheck(types=(nc.NETWORK_UNAVAILABLE,),
                                          error_values=("True",))]))
START = 1.8e9 + 200          # the fault's start (the Nodes' clock)

Timeline = list[tuple[float, list[dict[str, Any]]]]


def run(w: World, until: float, timeline: Timeline) -> None:
    """Judge every 5 s up to ``until`` (the fake clock), listing every
    Node whenever 10 s have passed since the last list."""
    while w.clock.now < until:
        w.judge_until(w.clock.now + 5, step=5.0)
        at = 1.8e9 + w.clock.now
        if not timeline or at - timeline[-1][0] >= 10:
            with w.api.cond:
                nodes = copy.deepcopy(list(w.api.nodes.values()))
            timeline.append((at, nodes))


def test_a_local_fault_repairs_that_node_alone(world: World) -> None:
    timeline: Timeline = []
    run(world, 200, timeline)
    world.write("node-c", report(ok=False))          # node-c's own fault
    run(world, 200 + 20 * 60, timeline)
    world.write("node-c", report())
    run(world, 200 + 30 * 60, timeline)
    marked = world.cond("node-c", nc.NETWORK_UNAVAILABLE)
    assert marked["reason"] == nc.REASON_RECOVERED
    for healer in HEALERS:
        repaired = healer.replay(timeline)
        assert set(repaired) == {"node-c"}
        # from the condition's lastTransitionTime (fault_after after the
        # fault) plus 300 s, to the monitor's next look (every 60 s)
        after = float(world.conf.network_health.fault_after)
        assert START + after + 300 <= repaired["node-c"] < \
            START + after + 360


def test_a_short_local_fault_repairs_nothing(world: World) -> None:
    timeline: Timeline = []
    run(world, 200, timeline)
    world.write("node-c", report(ok=False))
    run(world, 200 + 4 * 60, timeline)               # under 300 s
    world.write("node-c", report())
    run(world, 200 + 20 * 60, timeline)
    assert any(n["metadata"]["name"] == "node-c" and any(
        c["type"] == OWN and c["status"] == "False"
        for c in n["status"]["conditions"]) for _, ns in timeline for n in ns)
    for healer in HEALERS:
        assert healer.replay(timeline) == {}


def test_a_cluster_wide_fault_repairs_no_node(world: World) -> None:
    timeline: Timeline = []
    run(world, 200, timeline)
    for node in ("node-a", "node-b", "node-c"):
        world.write(node, report(ok=False))   # the Southbound DB is down
        run(world, world.clock.now + 5, timeline)   # noticed 5 s apart
    run(world, 200 + 30 * 60, timeline)
    for node in ("node-a", "node-b", "node-c"):
        world.write(node, report())
    run(world, 200 + 40 * 60, timeline)
    for healer in HEALERS:
        assert healer.replay(timeline) == {}
    # The same timeline with a node-local signal instead: the rule would
    # have repaired every node that failed (the replay can tell).
    naive: Timeline = []
    for at, nodes in timeline:
        failing = START <= at < START + 30 * 60
        naive.append((at, [{**n, "status": {"conditions": [{
            "type": OWN, "status": "False" if failing and
            n["metadata"]["name"] in ("node-a", "node-b", "node-c")
            else "True",
            "lastTransitionTime": "2027-01-15T08:03:20Z"}]}}
            for n in nodes]))
    assert set(HEALERS[0].replay(naive)) == {"node-a", "node-b", "node-c"}


def test_the_port_keeps_the_rules_defaults() -> None:
    check = NodeConditionCheck()
    assert (check.types, check.ok_values, check.error_values,
            check.unhealthy_duration) == (("Ready",), ("True",), (), 300.0)
    healer = AutoHealer([check])
    assert (healer.monitor_interval, healer.check_delay_after_add) == (
        60.0, 600.0)
    now = 1.8e9
    node: dict[str, Any] = {"metadata": {"name": "n"}, "status": {
        "conditions": [{"type": "Ready", "status": "Unknown",
                        "lastTransitionTime": "2027-01-15T07:55:00Z"}]}}
    assert healer.unhealthy([node], now) == ["n"]          # 300 s: repaired
    assert healer.unhealthy([node], now - 1) == []
    node["metadata"]["creationTimestamp"] = "2027-01-15T07:51:00Z"
    assert healer.unhealthy([node], now) == []             # too new
    node["metadata"] = {"name": "n", "labels": {
        "node-role.kubernetes.io/control-plane": ""}}
    assert healer.unhealthy([node], now) == []             # not a worker
    node["metadata"] = {"name": "n"}
    node["status"]["conditions"][0]["status"] = "True"
    assert healer.unhealthy([node], now) == []
