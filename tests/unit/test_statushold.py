"""CNI STATUS and readiness by the judge's word in the node's record: which
failing checks STATUS does not fail for during a cluster-wide fault, the
judge's verdict on the node itself, and how long either stands without
its judge, on a fake clock."""
from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kuryr_supervisor.health.checks.base import Result
from kuryr_supervisor.netcheck.codecs import canaryspec, clusterspec
from kuryr_supervisor.netcheck.codecs.clusterspec import ClusterVerdict, NodeVerdict
from kuryr_supervisor.netcheck.codecs.record import rfc3339
from kuryr_supervisor.netcheck.node.clusterview import ClusterView
from kuryr_supervisor.netcheck.node.netwatch import StatusFlags
from kuryr_supervisor.netcheck.node.statushold import StatusHold
from kuryr_supervisor.netcheck.node.verdict import VerdictCheck
from kuryr_supervisor.state import StatusCause
from kuryr_supervisor.state.cnistatus import Excuse, StatusBoard

NODE = "node-a"
OFF_SB = Result.failed("ovn-controller is not connected to the Southbound "
                       "database (tcp:sb:6642): not connected", shared=True)
NOT_RUNNING = Result.failed("ovn-controller is not running")
OK = Result.passed("fine")
NO_FAULT = ClusterVerdict()
#: The judge's wall clock is the node's plus this (both on the fake clock).
EPOCH = 1.8e9
LIFETIME = 60.0


#: The uid the API server gave the node's record.
UID = "5e1b6f0c-0000-4000-8000-000000000001"


def record(verdict: ClusterVerdict | None) -> dict[str, Any]:
    return {"metadata": {"name": NODE, "uid": UID},
            "spec": clusterspec.merged({"nodeName": NODE}, NODE, verdict)}


def declared(fault: str = "", node: NodeVerdict | None = None, *,
             renewed: float, lifetime: float = LIFETIME) -> ClusterVerdict:
    """What the judge writes, renewed at ``renewed`` (the fake clock)."""
    return ClusterVerdict(fault, "2026-01-01T00:00:02Z" if fault else "",
                          node, "controller-0_1", rfc3339(EPOCH + renewed),
                          lifetime, UID)


class World:
    def __init__(self, hold: float = 5.0, skew: float = 0.0) -> None:
        self.now = 100.0
        self.view = ClusterView(NODE, clock=lambda: self.now,
                                wall=lambda: EPOCH + self.now + skew)
        self.hold = StatusHold(self.view, lambda: hold,
                               clock=lambda: self.now)
        self.check = VerdictCheck(self.view)
        self.results: dict[str, Result] = {"ovsdb": OK, "ovn-controller": OK}
        self.board = StatusBoard()
        self.flags = StatusFlags(self.board, lambda: self.results,
                                 hold=self.hold)

    def tell(self, verdict: ClusterVerdict | None) -> None:
        """The record's watch brings a version with ``verdict``."""
        self.view.take(record(verdict))

    def at(self, now: float) -> tuple[int, Excuse]:
        """Time passes: the verdict check's run, the flags' look."""
        self.now = now
        self.results["network-verdict"] = self.check.run(now)
        self.flags.update()
        return self.board.answer()[0], self.board.excuse()


def test_a_shared_cause_is_held_then_fails_if_no_fault_is_declared() -> None:
    w = World()
    w.tell(NO_FAULT)
    assert w.view.judged is True and w.at(100) == (0, Excuse.NONE)
    w.results["ovn-controller"] = OFF_SB
    assert w.at(100.2) == (0, Excuse.HELD)
    code, cause, detail = w.board.answer()
    assert cause is StatusCause.OVN_CONTROLLER
    assert detail.startswith("ovn-controller: ovn-controller is not "
                             "connected")
    for tick in range(1, 19):                # the loops' 0.25 s
        assert w.at(100.2 + tick * 0.25) == (0, Excuse.HELD)
    assert w.at(105.2) == (50, Excuse.NONE)  # the hold is over: fails
    assert w.board.answer()[2].startswith("ovn-controller: ")


def test_a_declared_fault_excuses_the_checks_of_its_kind_alone() -> None:
    w = World()
    w.tell(NO_FAULT)
    w.results["ovn-controller"] = OFF_SB
    w.at(100)
    # The judge declared it (2 s later): the watch brings it at once.
    w.tell(declared("ovn-controller", renewed=101))
    assert w.at(101.1) == (0, Excuse.CLUSTER)
    assert w.view.verdict.fault == "ovn-controller"
    for t in range(130, 400, 30):            # renewed while it lasts
        w.tell(declared("ovn-controller", renewed=t))
        assert w.at(t + 29) == (0, Excuse.CLUSTER)
    # ovn-controller stopped here meanwhile: the same check, excused too
    # (the judge changes no condition during the fault either).
    w.results["ovn-controller"] = NOT_RUNNING
    assert w.at(401) == (0, Excuse.CLUSTER)
    # Another check of this node is its own: STATUS fails for it.
    w.results["ovsdb"] = Result.failed("br-int is gone")
    assert w.at(402) == (50, Excuse.CLUSTER)
    assert w.board.answer()[2] == "ovsdb: br-int is gone"
    w.results["ovsdb"] = OK
    w.results["flows"] = Result.failed("0 of 3 installed")
    assert w.at(403) == (51, Excuse.CLUSTER)
    del w.results["flows"]
    # Over: the node still off the database is failing on its own now.
    w.tell(NO_FAULT)
    assert w.at(404) == (50, Excuse.NONE)


def test_a_declared_fault_lapses_unless_its_judge_renews_it() -> None:
    """The controller stops during a cluster-wide fault: the node's STATUS
    fails for the fault within the declaration's lifetime of its last
    renewal, and says why once."""
    w = World()
    w.results["ovn-controller"] = OFF_SB
    w.tell(declared("ovn-controller", renewed=100))
    assert w.at(100) == (0, Excuse.CLUSTER)
    assert w.at(160) == (0, Excuse.CLUSTER)
    assert w.at(160.5) == (50, Excuse.NONE)
    assert w.view.judged is True and not w.view.standing()
    # Renewed again (a new leader): excused again.
    w.tell(declared("ovn-controller", renewed=170))
    assert w.at(170) == (0, Excuse.CLUSTER)


@pytest.mark.parametrize("skew", [-300.0, 300.0])
def test_a_skewed_clock_neither_stretches_nor_refuses_much(
        skew: float) -> None:
    """A node clock 5 min behind the judge's: the declaration lapses a
    lifetime after the node first saw its renewal, by its own monotonic
    clock. Ahead by as much: it has lapsed at once (the node judges
    alone: only the hold), never standing longer than its lifetime."""
    w = World(skew=skew)
    w.results["ovn-controller"] = OFF_SB
    w.tell(declared("ovn-controller", renewed=100))
    if skew > 0:
        assert w.at(100.1) == (0, Excuse.HELD)
        assert w.at(105.2) == (50, Excuse.NONE)
        return
    assert w.at(100.1) == (0, Excuse.CLUSTER)
    assert w.at(160) == (0, Excuse.CLUSTER)
    assert w.at(160.5) == (50, Excuse.NONE)


def test_a_declaration_the_node_cannot_trust_does_not_stand() -> None:
    """No renewal (an older judge's): nothing stands; a renewal from the
    future, a lifetime beyond the node's cap: none stands past its
    lifetime (or the cap) from the node's first sight of it."""
    w = World()
    w.results["ovn-controller"] = OFF_SB
    w.tell(ClusterVerdict("ovn-controller", "2026-01-01T00:00:02Z"))
    assert w.at(100) == (0, Excuse.HELD)     # judged, nothing declared yet
    assert w.at(106) == (50, Excuse.NONE)
    w.tell(declared("ovn-controller", renewed=106 + 3600))
    assert w.at(106.5) == (0, Excuse.CLUSTER)    # from its first sight
    assert w.at(106 + LIFETIME + 1) == (50, Excuse.NONE)
    w.tell(declared("ovn-controller", renewed=170, lifetime=86400))
    assert w.at(170) == (0, Excuse.CLUSTER)
    assert w.at(170 + clusterspec.MAX_LIFETIME + 1) == (50, Excuse.NONE)


def test_the_judges_verdict_on_the_node_fails_readiness_and_status() -> None:
    """The judge finds the node cut off while its own checks pass: the
    verdict check fails naming the judge's reason and STATUS answers 51
    with it, while the verdict stands; cleared by the judge, or lapsed."""
    w = World()
    w.tell(NO_FAULT)
    assert w.at(100) == (0, Excuse.NONE)
    assert w.check.run(100).ok
    cut = NodeVerdict("KuryrPeersUnreachable", "its canary cannot reach 2 "
                      "of 2 peers that other nodes reach (node-b, node-c)",
                      "2026-01-01T00:00:07Z")
    w.tell(declared(node=cut, renewed=101))
    assert w.at(101) == (51, Excuse.NONE)
    code, cause, detail = w.board.answer()
    assert cause is StatusCause.JUDGE
    assert "KuryrPeersUnreachable" in detail and "node-b, node-c" in detail
    result = w.check.run(101)
    assert not result.ok and "KuryrPeersUnreachable" in result.message
    # Cleared by the judge.
    w.tell(NO_FAULT)
    assert w.at(102) == (0, Excuse.NONE)
    # Declared again, then its judge is gone: lapses after its lifetime.
    w.tell(declared(node=cut, renewed=103))
    assert w.at(162) == (51, Excuse.NONE)
    assert w.at(163.5) == (0, Excuse.NONE)
    # Never excused: a cluster-wide fault of another kind beside it.
    w.tell(declared("ovn-controller", cut, renewed=170))
    w.results["ovn-controller"] = OFF_SB
    assert w.at(170) == (51, Excuse.CLUSTER)


def test_a_verdict_the_nodes_own_checks_say_adds_nothing() -> None:
    """The judge holds the node faulty for a check of its own (or its
    daemon not ready): the node's own checks answer, with their code, and
    clear with the cause, not with the judge's recovery."""
    w = World()
    w.results["ovn-controller"] = NOT_RUNNING
    local = NodeVerdict("KuryrLocalCheckFailed", "ovn-controller: down",
                        "2026-01-01T00:00:07Z")
    w.tell(declared(node=local, renewed=100))
    assert w.at(100) == (50, Excuse.NONE)
    assert w.board.answer()[1] is StatusCause.OVN_CONTROLLER
    assert w.check.run(100).ok
    w.results["ovn-controller"] = OK
    assert w.at(101) == (0, Excuse.NONE)


def test_a_node_without_a_judge_holds_nothing() -> None:
    for make in (lambda v: v.absent(),              # no CRD
                 lambda v: v.take(record(None)),    # no judge's part
                 lambda v: v.take(None)):           # no record
        w = World()
        make(w.view)
        assert w.view.judged is False
        w.results["ovn-controller"] = OFF_SB
        assert w.at(100) == (50, Excuse.NONE)


def test_a_cause_of_its_own_is_never_held() -> None:
    w = World()
    w.tell(NO_FAULT)
    w.results["ovn-controller"] = NOT_RUNNING
    assert w.at(100) == (50, Excuse.NONE)


def test_before_any_word_a_shared_cause_is_held() -> None:
    """At start (the record not yet seen), or with the API down: the
    judge may be there, so the hold applies; it ends all the same."""
    w = World()
    w.results["ovn-controller"] = OFF_SB
    assert w.view.judged is None
    assert w.at(100) == (0, Excuse.HELD)
    assert w.at(105.1) == (50, Excuse.NONE)
    w.tell(declared("ovn-controller", renewed=106))
    assert w.at(106) == (0, Excuse.CLUSTER)


def test_a_spec_that_does_not_hold_up_keeps_the_last_word() -> None:
    w = World()
    w.tell(declared("ovn-controller", renewed=100))
    for bad in ({"fault": "Not A Kind"}, {"fault": 3}, "x",
                {"fault": "ovsdb", "since": "x" * 40},
                {"node": {"reason": "NotOurs"}}, {"node": "x"},
                {"lifetimeSeconds": "60"}, {"judge": 3}):
        obj = record(ClusterVerdict())
        obj["spec"]["cluster"] = bad
        w.view.take(obj)
        assert w.view.verdict.fault == "ovn-controller", bad
    with pytest.raises(ValueError, match="nodeName"):
        clusterspec.verdict({"spec": {"nodeName": "node-b"}}, NODE)


def test_the_spec_keeps_each_writers_part() -> None:
    mine = ClusterVerdict("peers", "t", record=UID)
    judged = clusterspec.merged({"nodeName": NODE, "canary": {"portId": "p"}},
                                NODE, mine)
    part = clusterspec.field(mine)
    assert part["fault"] == "peers" and part["since"] == "t"
    assert judged == {"nodeName": NODE, "canary": {"portId": "p"},
                      "cluster": part}
    assert clusterspec.verdict({"metadata": {"uid": UID}, "spec": judged},
                               NODE) == mine
    again = canaryspec.merged(judged, NODE, canaryspec.Assignment())
    assert again == {"nodeName": NODE, "cluster": part}
    assert clusterspec.merged(again, NODE, None) == {"nodeName": NODE}
    assert clusterspec.merged(again, NODE, ClusterVerdict()) == {
        "nodeName": NODE, "cluster": {}}


def test_a_verdict_created_with_the_record_is_refused() -> None:
    """A node may create records (its own at start), spec and all: one
    created for another node with a verdict in it (excusing a check, or
    blaming the node) names no uid it could know, and changes nothing;
    the judge's own, which names the record's uid, does."""
    w = World()
    w.tell(NO_FAULT)
    w.results["ovn-controller"] = NOT_RUNNING
    cut = NodeVerdict("KuryrPeersUnreachable", "forged", "x")
    for forged in (declared("ovn-controller", cut, renewed=100),):
        for uid in ("", "another-record's-uid"):
            obj = record(dataclasses.replace(forged, record=uid))
            w.view.take(obj)
            assert w.at(100) == (50, Excuse.NONE)
            assert w.check.run(100).ok
    w.tell(declared("ovn-controller", renewed=100))
    assert w.at(100.5) == (0, Excuse.CLUSTER)
