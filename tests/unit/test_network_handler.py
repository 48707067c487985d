"""The network_health handler in the test's own process, against the fake
API over real HTTP, on a fake clock: records written as the nodes would
write them, the handler's list of them, its judgements, and what the Nodes
and the Events then say."""
from __future__ import annotations

import collections
import os
import threading

import pytest

from kuryr_supervisor.controller.leadership.election import identity
from kuryr_supervisor.controller.runtime import HandlerContext, Runtime
from kuryr_supervisor.netcheck.codecs import clusterspec
from kuryr_supervisor.netcheck.codecs import conditions as nc
from kuryr_supervisor.netcheck.codecs import record as nn
from kuryr_supervisor.netcheck.judge import assembly
from tests.fixtures.daemon import wait_until
from tests.fixtures.netjudge import (
    NODES,
    OWN,
    World,
    nodes_api,
    report,
    world_fixture,
)

api = pytest.fixture(nodes_api)
world = pytest.fixture(world_fixture)


def test_a_local_fault_marks_that_node_alone(world: World) -> None:
    world.judge_until(110)
    for node in NODES:
        assert world.cond(node)["status"] == "True"
        assert world.cond(node, nc.NETWORK_UNAVAILABLE)["reason"] == \
            "RouteCreated"
    healthy_since = world.cond("node-a")["lastTransitionTime"]
    patches = len(world.api.patches)
    world.write("node-c", report(ok=False))
    world.judge_until(130)
    own = world.cond("node-c")
    assert (own["status"], own["reason"]) == ("False", "KuryrLocalCheckFailed")
    assert "ovn-controller: down" in own["message"]
    unavailable = world.cond("node-c", nc.NETWORK_UNAVAILABLE)
    assert (unavailable["status"], unavailable["reason"]) == (
        "True", nc.REASON_FAULT)
    # one write for node-c, none for the others (20 judgements meanwhile)
    assert len(world.api.patches) == patches + 1
    assert world.cond("node-a")["lastTransitionTime"] == healthy_since
    wait_until(lambda: world.events("NodeNetworkFault"), 5)
    (event,) = world.events("NodeNetworkFault")
    assert event["involvedObject"]["kind"] == "Node"
    assert event["involvedObject"]["name"] == "node-c"
    assert event["type"] == "Warning"
    figures = world.state.verdicts.read()
    assert figures is not None and figures.faulty == 1 and not figures.cluster
    assert figures.faults == (("node-c", 2),)      # KuryrLocalCheckFailed
    # recovery: after recover_after (30 s) without a symptom
    world.write("node-c", report())
    world.judge_until(150)
    assert world.cond("node-c")["status"] == "False"
    world.judge_until(170)
    own = world.cond("node-c")
    assert (own["status"], own["reason"]) == ("True", nc.REASON_HEALTHY)
    unavailable = world.cond("node-c", nc.NETWORK_UNAVAILABLE)
    assert (unavailable["status"], unavailable["reason"]) == (
        "False", nc.REASON_RECOVERED)
    wait_until(lambda: world.events("NodeNetworkRecovered"), 5)


def test_a_cluster_wide_fault_changes_no_condition(world: World) -> None:
    world.judge_until(110)
    patches = len(world.api.patches)
    conditions = {n: world.api.nodes[n]["status"]["conditions"]
                  for n in NODES}
    for node in ("node-a", "node-b", "node-c"):
        world.write(node, report(ok=False))
    world.judge_until(500)
    assert len(world.api.patches) == patches
    assert {n: world.api.nodes[n]["status"]["conditions"]
            for n in NODES} == conditions
    wait_until(lambda: world.events("ClusterNetworkFault"), 5)
    (event,) = world.events("ClusterNetworkFault")
    assert event["involvedObject"] == {"apiVersion": "v1",
                                       "kind": "Namespace",
                                       "name": "kube-system"}
    assert event["metadata"]["namespace"] == "default"     # cluster-scoped
    assert "Southbound" in event["message"]
    figures = world.state.verdicts.read()
    assert figures is not None and figures.cluster and figures.troubled == 3
    for node in ("node-a", "node-b", "node-c"):
        world.write(node, report())
    world.judge_until(600)
    assert len(world.api.patches) == patches
    wait_until(lambda: world.events("ClusterNetworkRecovered"), 5)


def test_another_writers_network_unavailable_is_never_cleared(
        world: World) -> None:
    world.api.set_node_condition("node-c", {
        "type": nc.NETWORK_UNAVAILABLE, "status": "True",
        "reason": "NoRouteCreated", "lastTransitionTime": "x"})
    world.handler.nodes.load()          # as its resync would see it
    world.write("node-c", report(ok=False))
    world.judge_until(130)
    assert world.cond("node-c")["status"] == "False"
    world.write("node-c", report())
    world.judge_until(200)
    assert world.cond("node-c")["status"] == "True"
    assert world.cond("node-c", nc.NETWORK_UNAVAILABLE) == {
        "type": nc.NETWORK_UNAVAILABLE, "status": "True",
        "reason": "NoRouteCreated", "lastTransitionTime": "x"}


def test_a_node_that_changed_meanwhile_is_read_again(world: World) -> None:
    world.judge_until(105)
    world.api.set_node_condition("node-c", {"type": "Ready", "status": "True"})
    world.write("node-c", report(ok=False))
    world.judge_until(130)              # its cached version was stale: 409
    assert world.cond("node-c")["status"] == "False"
    assert world.cond("node-c", "Ready")["status"] == "True"


def test_a_vanished_record_releases_the_node(world: World) -> None:
    world.write("node-c", report(ok=False))
    world.judge_until(130)
    assert world.cond("node-c")["status"] == "False"
    world.api.delete_nodenetwork("node-c")
    world.judge_until(131)
    assert world.api.condition("node-c", OWN) is None
    unavailable = world.cond("node-c", nc.NETWORK_UNAVAILABLE)
    assert (unavailable["status"], unavailable["reason"]) == (
        "False", nc.REASON_RELEASED)


def test_a_new_leader_carries_on_and_writes_nothing_at_start(
        world: World) -> None:
    world.write("node-c", report(ok=False))
    world.judge_until(130)
    world.handler.stop()
    patches = len(world.api.patches)
    world.write("node-c", report())             # fixed meanwhile
    world.handler = world.make()                # the next leader
    world.judge_until(159)
    assert len(world.api.patches) == patches    # still faulty, nothing moved
    world.judge_until(161)
    assert world.cond("node-c")["status"] == "True"


def test_release_all_on_uninstall(world: World) -> None:
    world.write("node-c", report(ok=False))
    world.judge_until(130)
    world.handler.release_all()
    for node in NODES:
        assert world.api.condition(node, OWN) is None
    assert world.cond("node-c", nc.NETWORK_UNAVAILABLE)["reason"] == \
        nc.REASON_RELEASED
    assert world.cond("node-a", nc.NETWORK_UNAVAILABLE)["reason"] == \
        "RouteCreated"


def test_a_deleted_node_is_forgotten(world: World) -> None:
    world.judge_until(105)
    del world.api.nodes["node-e"]
    world.write("node-e", report(ok=False))
    world.judge_until(130)                      # its write finds no Node
    assert "node-e" not in world.handler.nodes.want


def test_a_new_handler_process_serves_no_old_figures(world: World) -> None:
    world.judge_until(102)
    assert world.state.verdicts.read() is not None
    world.handler.stop()
    ctx = HandlerContext(world.conf, world.state, world.ready.append)
    assembly.judge(Runtime(ctx, kubernetes=world.api.client("controller")))
    # (a follower's: it never judges)
    assert world.state.verdicts.read() is None


def test_the_judge_is_named_as_its_replicas_lease_holder(
        world: World) -> None:
    """What a verdict names as its judge is the replica's Lease identity:
    the master's pid the handler's context carries, never the handler
    process's own (outside a daemon, the context's default: this one)."""
    assert world.handler.specs.judge == identity(os.getpid())
    ctx = HandlerContext(world.conf, world.state, world.ready.append,
                         master_pid=4242)
    handler = assembly.judge(
        Runtime(ctx, kubernetes=world.api.client("controller")),
        clock=world.clock)
    try:
        assert handler.start(threading.Event())
        assert handler.specs.judge == identity(4242)
    finally:
        handler.stop()


def test_a_refused_write_backs_off(world: World) -> None:
    """RBAC refuses the Nodes' status (403): a node's write is tried again
    after 2, 4, 8... s (at most 60), never on every judgement."""
    world.judge_until(105)
    world.write("node-c", report(ok=False))
    world.sync()
    world.api.fail(403)
    before = len(world.api.requests)
    for _ in range(120):                    # two minutes, judged each second
        world.clock.now += 1.0
        world.handler.judge(world.clock.now)
    patches = [r for r in world.api.requests[before:]
               if r[2].endswith("/nodes/node-c/status")]
    assert 3 <= len(patches) <= 7, len(patches)
    world.api.fail(None)
    world.judge_until(world.clock.now + 61)
    assert world.cond("node-c")["status"] == "False"


def test_the_judge_looks_at_once_at_a_change_and_when_a_fault_falls_due(
        world: World) -> None:
    """A record that arrives wakes the watch loop (``wake_in`` 0); once
    judged, the loop is woken again when the symptom has been held
    ``fault_after``, not at the next periodic judgement."""
    fault_after = float(world.conf.network_health.fault_after)
    world.judge_until(105)
    assert world.handler.wake_in() > 1.0        # nothing pending
    world.clock.now += 0.3
    world.write("node-c", report(ok=False))
    world.sync()
    assert world.handler.wake_in() == 0.0
    world.handler.tick()
    assert world.handler.book.dirty is False
    assert world.handler.wake_in() == pytest.approx(fault_after, abs=0.01)
    world.clock.now += world.handler.wake_in()
    world.handler.tick()
    own = world.cond("node-c")
    assert (own["status"], own["reason"]) == ("False", "KuryrLocalCheckFailed")


def spec_puts(world: World, since: int) -> list[str]:
    """The nodes whose record's spec was written since request ``since``."""
    return [r[2].rsplit("/", 1)[1] for r in world.api.requests[since:]
            if r[1] == "PUT" and "/nodenetworks/" in r[2]
            and not r[2].endswith("/status")]


def test_the_clusters_verdict_goes_into_every_record_once_per_change(
        world: World) -> None:
    """Every judged record says a judge judges it; a cluster-wide fault
    declared, then over, is written once into each (the nodes it names
    first), then renewed every half its lifetime while it lasts and no
    more often, the rest of the spec kept; releasing takes it out."""
    world.judge_until(105)
    for node in NODES:
        assert world.api.nodenetworks[node]["spec"]["cluster"] == {}
    canary = {"portId": "p", "mac": "fa:16:3e:00:00:05",
              "address": "10.0.0.5/24"}
    obj = dict(world.api.nodenetworks["node-e"])
    obj["spec"] = {**obj["spec"], "canary": canary}  # network_canary's part
    world.handler.client.nodenetworks.replace("node-e", obj)
    world.judge_until(110)
    before = len(world.api.requests)
    for node in ("node-b", "node-c", "node-d"):
        world.write(node, report(ok=False))
    world.judge_until(300)
    cluster = world.handler.state.cluster
    assert cluster is not None
    written = spec_puts(world, before)
    assert sorted(written[:3]) == ["node-b", "node-c", "node-d"]
    assert sorted(written[:5]) == sorted(NODES)      # declared: once each
    renewals = (300 - cluster.since) // 30           # then every 30 s
    assert collections.Counter(written) == {n: 1 + renewals for n in NODES}
    says = {n: world.api.nodenetworks[n]["spec"]["cluster"] for n in NODES}
    assert {v["fault"] for v in says.values()} == {"ovn-controller"}
    assert len({v["since"] for v in says.values()}) == 1
    wall = 1.8e9 + world.clock.now
    for v in says.values():
        assert v["lifetimeSeconds"] == 60 and v["judge"]
        assert 0 <= wall - nn.epoch(v["renewTime"]) < 30
    assert world.api.nodenetworks["node-e"]["spec"]["canary"] == canary
    # Over after cluster_settle (60 s) calm: written again, once each.
    for node in ("node-b", "node-c", "node-d"):
        world.write(node, report())
    before = len(world.api.requests)
    world.judge_until(400)
    assert world.handler.state.cluster is None
    # Renewed through the settling (60 s), then written over once each.
    after = collections.Counter(spec_puts(world, before))
    assert set(after) == set(NODES) and max(after.values()) <= 4, after
    for node in NODES:
        assert world.api.nodenetworks[node]["spec"]["cluster"] == {}
    world.handler.release_all()
    for node in NODES:
        assert "cluster" not in world.api.nodenetworks[node]["spec"]
    assert world.api.nodenetworks["node-e"]["spec"]["canary"] == canary


def test_a_verdict_write_that_conflicts_is_made_on_a_later_pass(
        world: World) -> None:
    """A node wrote its record between the judge's read and its write
    (409): the write waits for the next version, never overwrites."""
    world.judge_until(105)
    for node in ("node-b", "node-c", "node-d"):
        world.write(node, report(ok=False))
    world.sync()
    world.write("node-a", report())            # after the judge's read
    world.clock.now += 1
    world.handler.judge(world.clock.now)
    assert world.handler.state.cluster is not None
    assert world.api.nodenetworks["node-a"]["spec"]["cluster"] == {}
    world.judge_until(world.clock.now + 1)     # the watch brings it
    assert world.api.nodenetworks["node-a"]["spec"]["cluster"]["fault"] == \
        "ovn-controller"


def node_part(world: World, node: str) -> dict[str, object] | None:
    """The judge's verdict on ``node`` in its record's spec."""
    part = world.api.nodenetworks[node]["spec"].get("cluster") or {}
    found: dict[str, object] | None = part.get("node")
    return found


def test_a_local_fault_is_told_to_the_node_in_its_record(world: World) -> None:
    """The judge's verdict on a node reaches it through its record: while
    the node is held faulty its record says why (renewed every half
    lifetime); it is taken out once the node has recovered; the other
    records never say anything of the kind."""
    world.judge_until(110)
    world.write("node-c", report(ok=False))
    world.judge_until(130)
    part = node_part(world, "node-c")
    assert part is not None and part["reason"] == "KuryrLocalCheckFailed"
    assert "ovn-controller: down" in str(part["message"])
    says = clusterspec.verdict(world.api.nodenetworks["node-c"], "node-c")
    assert says is not None and says.declares and says.judge
    assert clusterspec.standing(says, 1.8e9 + world.clock.now)
    assert not clusterspec.standing(says, 1.8e9 + world.clock.now + 61)
    for node in set(NODES) - {"node-c"}:
        assert node_part(world, node) is None
    since = part["since"]
    world.judge_until(145)
    assert node_part(world, "node-c") == part | {"since": since}
    world.write("node-c", report())
    world.judge_until(150)
    assert node_part(world, "node-c") is not None   # recover_after: 30 s
    world.judge_until(180)
    assert node_part(world, "node-c") is None
    assert world.api.nodenetworks["node-c"]["spec"]["cluster"] == {}


def test_records_of_no_node_are_not_judged(world: World) -> None:
    """Four records named after no Node, each failing a check, beside a
    real node's local fault: no cluster-wide fault, the real fault
    stands, the ghosts get no verdict and no spec write; one lookup each,
    not one per judgement."""
    world.judge_until(110)
    world.write("node-c", report(ok=False))
    world.judge_until(120)
    assert world.cond("node-c")["reason"] == "KuryrLocalCheckFailed"
    ghosts = [f"ghost-{i}" for i in range(4)]
    for ghost in ghosts:
        world.write(ghost, report(ok=False))
    before = len(world.api.requests)
    world.judge_until(160)
    assert world.handler.state.cluster is None
    assert set(world.handler.state.nodes) == set(NODES)
    assert world.cond("node-c")["reason"] == "KuryrLocalCheckFailed"
    assert not set(spec_puts(world, before)) & set(ghosts)
    for ghost in ghosts:
        assert "cluster" not in world.api.nodenetworks[ghost]["spec"]
    gets = [r for r in world.api.requests[before:]
            if r[1] == "GET" and r[2].startswith("/api/v1/nodes/ghost")]
    assert len(gets) == len(ghosts)     # asked again only after a minute
    # A ghost that turns out to be a Node (it joined) is judged.
    world.api.add_node("ghost-0")
    world.judge_until(230)
    assert "ghost-0" in world.handler.state.nodes
    assert set(world.handler.state.nodes) == {*NODES, "ghost-0"}
