"""The judge and the service path: a node whose canary alone cannot reach
the canary Service's VIP is its own fault (``KuryrServicePathBroken``,
a verdict the node fails its readiness for); most nodes failing it is a
cluster-wide fault of kind ``services`` and no node moves. Timelines as
in test_network_judge.py, on the same world."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kuryr_supervisor.netcheck.codecs import record as nn
from kuryr_supervisor.netcheck.judge import servicepath
from kuryr_supervisor.netcheck.node.verdict import OFF_NODE
from kuryr_supervisor.state.netverdicts import KINDS, REASONS
from tests.unit.test_network_judge import NODES5, World, canary, report

VIP = "10.43.0.10"


def with_vip(reached: bool) -> nn.NetworkReport:
    return dataclasses.replace(
        report(checks={"ovsdb": True}, gateway=True),
        service=nn.Probe("", VIP, reached, 1.0 if reached else None))


def start(nodes: Sequence[str] = NODES5) -> World:
    w = World()
    for node in nodes:
        w.write(node, dataclasses.replace(with_vip(True), peers=tuple(
            nn.Probe(p, canary(p), True) for p in nodes if p != node)))
    w.run(100)
    assert not w.faulty()
    return w


def vip(w: World, node: str, reached: bool, *, checks: bool = True,
        address: str = VIP) -> None:
    before = w.reports[node]
    w.write(node, dataclasses.replace(before, checks=(
        nn.LocalCheck("ovsdb", checks, "ok" if checks else "broken"),),
        service=nn.Probe("", address, reached, 1.0 if reached else None)))


def test_one_node_that_cannot_reach_the_vip_is_its_own_fault() -> None:
    w = start()
    vip(w, "c", False)
    at = w.now
    w.run(at + 4)
    assert not w.faulty() and w.last is not None
    assert w.last.verdicts["c"].suspect
    w.run(at + 5)
    assert w.faulty() == {"c"} and w.last.cluster is None
    verdict = w.last.verdicts["c"]
    assert verdict.reason == "KuryrServicePathBroken"
    assert VIP in verdict.message and "4 other node(s)" in verdict.message
    # The node's readiness and STATUS fail for it: only the others see it.
    assert verdict.reason in OFF_NODE and verdict.reason in REASONS
    vip(w, "c", True)
    back = w.now
    w.run(back + 30)
    assert not w.faulty()


def test_most_nodes_failing_the_vip_is_cluster_wide_and_no_node_moves(
        ) -> None:
    """Octavia or OVN Northbound losing the load balancer breaks every
    node's Services: the cloud's fault, never a node condition."""
    w = start()
    for node in NODES5:
        vip(w, node, False)
    j = w.run(w.now + 120)
    assert not w.faulty()
    assert j.cluster is not None and j.cluster.kind == "services"
    assert "Octavia" in j.cluster.message and j.troubled == 5
    assert not any(jj.changed for _, jj in w.history)
    for node in NODES5:
        vip(w, node, True)
    j = w.run(w.now + 120)
    assert j.cluster is None and not w.faulty()


def test_three_of_five_failing_is_cluster_wide_first_signs_withdrawn(
        ) -> None:
    w = start()
    vip(w, "a", False)
    w.run(w.now + 6)
    assert w.faulty() == {"a"}        # alone at first: its own fault
    vip(w, "b", False)
    vip(w, "c", False)
    j = w.run(w.now + 2)
    assert j.cluster is not None and j.cluster.kind == "services"
    assert not w.faulty()             # a's was a first sign: withdrawn
    assert any(jj.withdrawn == ("a",) for _, jj in w.history)


def test_two_of_five_failing_are_each_blamed() -> None:
    w = start()
    vip(w, "a", False)
    vip(w, "b", False)
    w.run(w.now + 6)
    assert w.faulty() == {"a", "b"}
    assert w.last is not None and w.last.cluster is None


def test_a_node_whose_own_check_fails_explains_its_vip_failure() -> None:
    w = start()
    vip(w, "c", False, checks=False)
    w.run(w.now + 6)
    assert w.faulty() == {"c"} and w.last is not None
    assert w.last.verdicts["c"].reason == "KuryrLocalCheckFailed"


def test_a_node_probing_another_address_has_no_witness() -> None:
    """A VIP the others do not probe (an old spec) blames no one: it is
    trouble, not a node's fault."""
    w = start()
    vip(w, "c", False, address="10.43.0.99")
    w.run(w.now + 60)
    assert not w.faulty() and w.last is not None
    assert w.last.troubled == 1 and w.last.cluster is None


def test_two_nodes_one_failing_the_vip_is_blamed_both_is_cluster_wide(
        ) -> None:
    w = start(("a", "b"))
    vip(w, "a", False)
    w.run(w.now + 6)
    assert w.faulty() == {"a"}
    vip(w, "b", False)
    j = w.run(w.now + 2)
    assert j.cluster is not None and j.cluster.kind == "services"


def test_no_vip_probed_changes_nothing() -> None:
    """Without the services handler no node probes a VIP: the judge is
    as before (no trouble, no kind of its own)."""
    w = start()
    for node in NODES5:
        w.write(node, dataclasses.replace(w.reports[node], service=None))
    j = w.run(w.now + 60)
    assert j.troubled == 0 and not w.faulty()


def test_the_vocabulary() -> None:
    assert servicepath.KIND in KINDS
    assert servicepath.REASON in REASONS
