"""The Cluster API MachineHealthCheck shipped in etc/cluster-api (and shown
in the admin guide), read as Cluster API reads it (tests/fixtures/
machinehealthcheck.py, a port of its rules) and replayed against the Node
conditions the network judge publishes: a local fault gets that Machine,
and only it, remediated; a cluster-wide fault gets none; and the cap
stops remediation altogether when most nodes look unhealthy at once.

The timelines come from the judge itself, as in the auto-healer replay:
the handler driven with records over a fake clock against the fake API,
every Node listed each 10 s of that clock."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kuryr_supervisor.netcheck.codecs import conditions as nc
from tests.fixtures.machinehealthcheck import HealthCheck, duration, load
from tests.fixtures.netjudge import NODES, OWN, World, nodes_api, report, world_fixture

api = pytest.fixture(nodes_api)
world = pytest.fixture(world_fixture)

SHIPPED = Path(__file__).parents[2] / "etc" / "cluster-api"
FILES = ("machinehealthcheck.yaml", "machinehealthcheck-v1beta1.yaml")
START = 1.8e9 + 200          # the fault's start (the Nodes' clock)

Timeline = list[tuple[float, list[dict[str, Any]]]]


def shipped(name: str = FILES[0]) -> HealthCheck:
    return load(yaml.safe_load((SHIPPED / name).read_text()))


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


@pytest.mark.parametrize("name", FILES)
def test_the_shipped_files_are_what_cluster_api_reads(name: str) -> None:
    doc = yaml.safe_load((SHIPPED / name).read_text())
    check = load(doc)           # every field one the API has
    # our own type, False: set during a local fault only (never Unknown)
    assert check.conditions == ((nc.DEFAULT_TYPE, "False", 300.0),)
    assert check.max_unhealthy == "40%" and not check.unhealthy_range
    assert doc["spec"]["clusterName"] and doc["spec"]["selector"]


def test_both_versions_say_the_same() -> None:
    assert shipped(FILES[0]) == shipped(FILES[1])


def test_a_field_the_api_does_not_have_is_refused() -> None:
    doc = yaml.safe_load((SHIPPED / FILES[0]).read_text())
    doc["spec"]["maxUnhealthy"] = "40%"          # v1beta1's, not v1beta2's
    with pytest.raises(ValueError, match="maxUnhealthy"):
        load(doc)
    doc = yaml.safe_load((SHIPPED / FILES[1]).read_text())
    doc["spec"]["unhealthyConditions"][0]["timeoutSeconds"] = 300
    with pytest.raises(ValueError, match="timeoutSeconds"):
        load(doc)


def test_a_local_fault_remediates_that_machine_alone(world: World) -> None:
    timeline: Timeline = []
    run(world, 200, timeline)
    world.write("node-c", report(ok=False))          # node-c's own fault
    run(world, 200 + 20 * 60, timeline)
    world.write("node-c", report())
    run(world, 200 + 30 * 60, timeline)
    remediated = shipped().replay(timeline)
    assert set(remediated) == {"node-c"}
    # from the condition's lastTransitionTime (fault_after after the
    # fault) plus 300 s, to the next list (every 10 s)
    after = float(world.conf.network_health.fault_after)
    assert START + after + 300 < remediated["node-c"] <= \
        START + after + 300 + 15


def test_a_short_local_fault_remediates_nothing(world: World) -> None:
    timeline: Timeline = []
    run(world, 200, timeline)
    world.write("node-c", report(ok=False))
    run(world, 200 + 4 * 60, timeline)               # under 300 s
    world.write("node-c", report())
    run(world, 200 + 20 * 60, timeline)
    assert shipped().replay(timeline) == {}


def test_a_cluster_wide_fault_remediates_no_machine(world: World) -> None:
    timeline: Timeline = []
    run(world, 200, timeline)
    for node in ("node-a", "node-b", "node-c"):
        world.write(node, report(ok=False))   # the Southbound DB is down
        run(world, world.clock.now + 5, timeline)   # noticed 5 s apart
    run(world, 200 + 30 * 60, timeline)
    for node in ("node-a", "node-b", "node-c"):
        world.write(node, report())
    run(world, 200 + 40 * 60, timeline)
    assert shipped().replay(timeline) == {}


def marked(nodes: set[str], since: str) -> list[dict[str, Any]]:
    return [{"metadata": {"name": name}, "status": {"conditions": [{
        "type": OWN, "status": "False" if name in nodes else "True",
        "lastTransitionTime": since}]}} for name in NODES]


def test_the_cap_stops_remediation_when_most_nodes_look_unhealthy() -> None:
    """A node-local signal that flips on 3 of 5 nodes at once (a judge-less
    setup, or a Ready-based check): 40 % of 5 is 2, so none of them is
    remediated; without the cap, all three would be."""
    since = "2027-01-15T08:00:00Z"              # 1.8e9
    timeline = [(1.8e9 + 600, marked({"node-a", "node-b", "node-c"}, since))]
    assert shipped().replay(timeline) == {}
    uncapped = HealthCheck(shipped().conditions)
    assert set(uncapped.replay(timeline)) == {"node-a", "node-b", "node-c"}
    # two at once are within the cap
    two = [(1.8e9 + 600, marked({"node-a", "node-b"}, since))]
    assert set(shipped().replay(two)) == {"node-a", "node-b"}


def test_the_port_keeps_cluster_apis_rules() -> None:
    check = HealthCheck(((OWN, "False", 300.0),), "40%")
    conditions = [{"type": OWN, "status": "False",
                   "lastTransitionTime": "2027-01-15T07:55:00Z"}]
    now = 1.8e9                                 # 2027-01-15T08:00:00Z
    assert not check.unhealthy(conditions, now)     # not strictly after
    assert check.unhealthy(conditions, now + 1)
    conditions[0]["status"] = "Unknown"
    assert not check.unhealthy(conditions, now + 1)     # status must match
    assert not check.unhealthy([], now + 1)             # no condition
    assert [check.allowed(n, 5) for n in range(4)] == [True, True, True, False]
    assert [check.allowed(n, 2) for n in range(2)] == [True, False]
    ranged = HealthCheck(check.conditions, "100%", "[1-2]")
    assert [ranged.allowed(n, 9) for n in range(4)] == [False, True, True,
                                                         False]
    assert duration("1h30m") == 5400.0 and duration("300s") == 300.0
    with pytest.raises(ValueError):
        duration("5 minutes")
