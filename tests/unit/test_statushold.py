"""CNI STATUS during a cluster-wide fault: the judge's word in the node's
record (what the node reads of it, how often), and which failing checks
STATUS then does not fail for, on a fake clock."""
from __future__ import annotations

from typing import Any

import pytest

from kuryr_supervisor.health.checks.base import Result
from kuryr_supervisor.health.clusterview import ClusterView
from kuryr_supervisor.health.netwatch import StatusFlags
from kuryr_supervisor.health.statushold import FAST, SLOW, StatusHold
from kuryr_supervisor.kubernetes import canaryspec, clusterspec
from kuryr_supervisor.kubernetes.clusterspec import ClusterVerdict
from kuryr_supervisor.kubernetes.wire import K8sTemporary
from kuryr_supervisor.state import StatusCause
from kuryr_supervisor.state.cnistatus import Excuse, StatusBoard

NODE = "node-a"
OFF_SB = Result.failed("ovn-controller is not connected to the Southbound "
                       "database (tcp:sb:6642): not connected", shared=True)
NOT_RUNNING = Result.failed("ovn-controller is not running")
OK = Result.passed("fine")
NO_FAULT = ClusterVerdict()


def record(verdict: ClusterVerdict | None) -> dict[str, Any]:
    return {"metadata": {"name": NODE},
            "spec": clusterspec.merged({"nodeName": NODE}, NODE, verdict)}


class Api:
    """The node's own record as the API has it; GETs counted."""

    def __init__(self, verdict: ClusterVerdict | None = NO_FAULT):
        self.obj: dict[str, Any] | None = record(verdict)
        self.gets = 0
        self.down = False

    def get_nodenetwork(self, name: str) -> dict[str, Any] | None:
        assert name == NODE
        self.gets += 1
        if self.down:
            raise K8sTemporary("API down")
        return self.obj


class World:
    def __init__(self, verdict: ClusterVerdict | None = NO_FAULT,
                 hold: float = 5.0) -> None:
        self.now = 100.0
        self.api = Api(verdict)
        self.view = ClusterView(self.api, NODE, clock=lambda: self.now)
        self.hold = StatusHold(self.view, lambda: hold,
                               clock=lambda: self.now)
        self.results: dict[str, Result] = {"ovsdb": OK, "ovn-controller": OK}
        self.board = StatusBoard()
        self.flags = StatusFlags(self.board, lambda: self.results,
                                 hold=self.hold)

    def written(self) -> None:
        """The record writer's last heartbeat (50 s before): its answer
        told the view."""
        self.now = 50.0
        self.view.take(self.api.obj)

    def at(self, now: float) -> tuple[int, Excuse]:
        """Time passes: the view's loop and the flags' look."""
        self.now = now
        self.view.step()
        self.flags.update()
        self.view.step()
        return self.board.answer()[0], self.board.excuse()


def test_a_shared_cause_is_held_then_fails_if_no_fault_is_declared() -> None:
    w = World()
    w.written()
    assert w.view.judged is True and w.at(100) == (0, Excuse.NONE)
    assert w.api.gets == 0                   # nothing asked at steady state
    w.results["ovn-controller"] = OFF_SB
    assert w.at(100.2) == (0, Excuse.HELD)
    code, cause, detail = w.board.answer()
    assert cause is StatusCause.OVN_CONTROLLER
    assert detail.startswith("ovn-controller: ovn-controller is not "
                             "connected")
    assert w.api.gets == 1                   # asked at once
    for tick in range(1, 19):                # the loops' 0.25 s
        assert w.at(100.2 + tick * 0.25) == (0, Excuse.HELD)
    assert w.api.gets == 5                   # every FAST second
    assert w.at(105.2) == (50, Excuse.NONE)  # the hold is over: fails
    assert w.board.answer()[2].startswith("ovn-controller: ")
    gets = w.api.gets
    w.at(110)
    assert w.api.gets == gets                # SLOW now
    w.at(105.2 + SLOW + 0.1)
    assert w.api.gets == gets + 1


def test_a_declared_fault_excuses_the_checks_of_its_kind_alone() -> None:
    w = World()
    w.written()
    w.results["ovn-controller"] = OFF_SB
    w.at(100)
    # The judge declared it (2 s later), the node reads it within FAST.
    w.api.obj = record(ClusterVerdict("ovn-controller", "2026-01-01T00:00:02Z"))
    assert w.at(101.1) == (0, Excuse.CLUSTER)
    assert w.view.verdict.fault == "ovn-controller"
    assert w.at(400) == (0, Excuse.CLUSTER)  # however long it lasts
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
    w.api.obj = record(ClusterVerdict())
    assert w.at(403 + SLOW + 0.1) == (50, Excuse.NONE)


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
    w.written()
    w.results["ovn-controller"] = NOT_RUNNING
    assert w.at(100) == (50, Excuse.NONE)
    assert w.api.gets == 1                   # a late verdict is looked for


def test_before_any_word_a_shared_cause_is_held() -> None:
    """At start (the record not yet written), or with the API down: the
    judge may be there, so the hold applies; it ends all the same."""
    w = World()
    w.api.down = True
    w.results["ovn-controller"] = OFF_SB
    assert w.view.judged is None
    assert w.at(100) == (0, Excuse.HELD)
    assert w.at(105.1) == (50, Excuse.NONE)
    w.api.down = False
    w.api.obj = record(ClusterVerdict("ovn-controller", "x"))
    assert w.at(105.1 + SLOW) == (0, Excuse.CLUSTER)


def test_a_spec_that_does_not_hold_up_keeps_the_last_word() -> None:
    w = World(ClusterVerdict("ovn-controller", "x"))
    w.written()
    for bad in ({"fault": "Not A Kind"}, {"fault": 3}, "x",
                {"fault": "ovsdb", "since": "x" * 40}):
        obj = record(ClusterVerdict())
        obj["spec"]["cluster"] = bad
        w.view.take(obj)
        assert w.view.verdict.fault == "ovn-controller", bad
    with pytest.raises(ValueError, match="nodeName"):
        clusterspec.verdict({"spec": {"nodeName": "node-b"}}, NODE)


def test_the_spec_keeps_each_writers_part() -> None:
    judged = clusterspec.merged({"nodeName": NODE, "canary": {"portId": "p"}},
                                NODE, ClusterVerdict("peers", "t"))
    assert judged == {"nodeName": NODE, "canary": {"portId": "p"},
                      "cluster": {"fault": "peers", "since": "t"}}
    assert clusterspec.verdict({"spec": judged}, NODE) == ClusterVerdict(
        "peers", "t")
    again = canaryspec.merged(judged, NODE, canaryspec.Assignment())
    assert again == {"nodeName": NODE,
                     "cluster": {"fault": "peers", "since": "t"}}
    assert clusterspec.merged(again, NODE, None) == {"nodeName": NODE}
    assert clusterspec.merged(again, NODE, ClusterVerdict()) == {
        "nodeName": NODE, "cluster": {}}


def test_the_view_asks_nothing_while_status_needs_no_word() -> None:
    w = World()
    for t in range(100, 200, 7):
        w.at(float(t))
    assert w.api.gets == 0 and w.view.judged is None
    w.results["ovsdb"] = Result.failed("x")   # a check of the node's own
    w.at(200)
    assert w.api.gets == 1                    # SLOW: a late verdict
    w.at(200 + FAST)
    assert w.api.gets == 1
