"""What the data-plane checks make of CNI STATUS and of the node's
record: the tables by check name, the STATUS flags published (and
republished by a HealthManager that restarts), the report's readiness."""
from __future__ import annotations

from kuryr_supervisor.health.checks.base import Result
from kuryr_supervisor.netcheck.codecs import record as nn
from kuryr_supervisor.netcheck.node.dataplane import ReportSource, status_answer
from kuryr_supervisor.netcheck.node.netwatch import StatusFlags
from kuryr_supervisor.state import LiveCause, Overall, StatusCause
from kuryr_supervisor.state.cnistatus import StatusBoard

OK = Result.passed("fine")


def test_the_worst_failing_check_answers_and_all_are_named() -> None:
    assert status_answer({}) == (0, StatusCause.NONE, "")
    assert status_answer({"ovsdb": OK, "other": Result.failed("x")}) == (
        0, StatusCause.NONE, "")            # not a data-plane check
    code, cause, text = status_answer({
        "ovsdb": Result.failed("OVSDB unusable"),
        "flows": Result.failed("0 of 3 installed")})
    assert (code, cause) == (51, StatusCause.FLOWS)
    assert text == "ovsdb: OVSDB unusable; flows: 0 of 3 installed"
    assert status_answer({"ovn-controller": Result.failed("down")})[:2] == (
        50, StatusCause.OVN_CONTROLLER)


def test_flags_follow_the_checks_and_a_restart_republishes() -> None:
    board = StatusBoard()
    results = {"ovsdb": Result.failed("bridge missing")}
    StatusFlags(board, lambda: results).update()
    assert board.answer() == (50, StatusCause.OVSDB, "ovsdb: bridge missing")
    results["ovsdb"] = OK
    # A new HealthManager (restarted) finds 50 left by the old one.
    StatusFlags(board, lambda: results).update()
    assert board.answer() == (0, StatusCause.NONE, "")


def test_the_report_says_since_when_the_daemon_is_ready() -> None:
    wall = [1000.0]
    overall = [Overall(False, False, LiveCause.NONE, 0.0, "starting")]
    source = ReportSource(lambda: overall[0], lambda: {"ovsdb": OK,
                                                       "checker": OK},
                          wall=lambda: wall[0])
    first = source()
    assert not first.daemon.ready and first.daemon.since == 1000.0
    assert first.checks == (nn.LocalCheck("ovsdb", True, "fine"),)
    wall[0] = 1005.0
    overall[0] = Overall(True, True, LiveCause.NONE, 5.0, "live, ready")
    ready = source()
    assert ready.daemon.ready and ready.daemon.since == 1005.0
    wall[0] = 1010.0
    assert source().daemon.since == 1005.0     # no change, same since
    probes = (nn.Probe("", "10.0.0.1", True), (), nn.Canary("10.0.0.5", "p"))
    with_probes = ReportSource(lambda: overall[0], dict, probes=lambda: probes)
    assert with_probes().gateway == probes[0]
    assert with_probes().canary == probes[2]
