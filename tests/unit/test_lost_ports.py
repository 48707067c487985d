"""The pods whose port is lost: the follower's book (kubernetes/lostpods.py),
its board in real shared memory across a forked writer
(state/lostports.py), and how the node's health shows it: /status,
/metrics, the NodeNetwork record (rendered, read back with and without
the field) and ``kuryr-supervisor status``; never readiness, CNI STATUS
or the network judge's verdict."""
from __future__ import annotations

import json
import multiprocessing
from typing import Any

import pytest

from kuryr_supervisor.cli import status as cli_status
from kuryr_supervisor.health.checks.base import Result
from kuryr_supervisor.kubernetes.lostpods import LostPods
from kuryr_supervisor.netcheck.codecs import record as nn
from kuryr_supervisor.netcheck.node.dataplane import ReportSource, status_answer
from kuryr_supervisor.state import SharedState
from kuryr_supervisor.state.lostports import (
    MAX_ROWS,
    LostPort,
    LostPortBoard,
    LostPorts,
)
from kuryr_supervisor.state.verdict import LiveCause, Overall
from tests.unit.test_probes import Env

MAC = "interface ksv1 of pod uid-a has MAC 0e:00:00:00:00:09, not 0e:..."


def booked() -> tuple[LostPods, list[LostPorts]]:
    published: list[LostPorts] = []
    return LostPods(published.append, most=3), published


def test_the_book_follows_lose_found_relist_and_stays_bounded() -> None:
    book, published = booked()
    book.lose("ns", "a", "p2", MAC)
    assert published[-1] == LostPorts(1, (LostPort("ns", "a", "p2", MAC),))
    book.lose("ns", "a", "p2", MAC)            # the same again: no change
    assert len(published) == 1
    book.lose("ns", "a", "p3", "OVSDB refuses")   # made again once more
    assert published[-1].pods == (LostPort("ns", "a", "p3", "OVSDB refuses"),)
    book.lose("ns", "b", "q2", "x" * 10_000)
    assert published[-1].count == 2
    assert len(published[-1].pods[1].why) == 256
    book.found("ns", "a")                      # a later repoint succeeded
    assert published[-1] == LostPorts(1, (published[-1].pods[0],))
    assert published[-1].pods[0].name == "b"
    book.found("ns", "zzz")                    # never lost: no change
    assert len(published) == 4
    for name in ("c", "d", "e"):               # beyond ``most``
        book.lose("ns", name, "r", "why")
    assert published[-1].count == 3
    assert [p.name for p in published[-1].pods] == ["b", "c", "d"]
    book.keep_only([("ns", "c")])              # a relist without b, d
    assert published[-1] == LostPorts(1, (LostPort("ns", "c", "r", "why"),))
    book.keep_only([("ns", "c")])              # a relist publishes anyway
    assert len(published) == 8 and published[-1].count == 1


def _write(board: LostPortBoard, lost: LostPorts) -> None:
    board.publish(lost)


def test_the_board_crosses_processes_bounded_and_cut() -> None:
    ctx = multiprocessing.get_context("fork")
    board = LostPortBoard.create(ctx)
    assert board.read() == LostPorts()
    many = LostPorts(MAX_ROWS + 6, tuple(
        LostPort("default", f"web-{i:03d}", f"port-{i}", "another MAC")
        for i in range(MAX_ROWS + 6)))
    child = ctx.Process(target=_write, args=(board, many))
    child.start()
    child.join(10)
    assert child.exitcode == 0
    seen = board.read()
    assert seen.count == MAX_ROWS + 6 and seen.pods == many.pods[:MAX_ROWS]
    long = LostPort("n" * 100, "é" * 200, "p" * 100, "ü" * 400)
    board.publish(LostPorts(1, (long,)))
    [cut] = board.read().pods
    assert cut.namespace == "n" * 63 and cut.port_id == "p" * 64
    assert cut.name == "é" * 126 and cut.why == "ü" * 128  # whole characters
    board.publish(LostPorts())
    assert board.read() == LostPorts()


NONE = LostPorts()


def report(lost: LostPorts = NONE) -> nn.NetworkReport:
    return nn.NetworkReport(nn.Daemon(True, 1.7e9, "live, ready"),
                            (nn.LocalCheck("ovsdb", True, "OVSDB answers"),),
                            lost=lost)


LOST = LostPorts(2, (LostPort("default", "web-1", "p2", "another MAC"),
                     LostPort("shop", "db-0", "p7", "OVSDB refuses")))


def _record(status: dict[str, Any]) -> dict[str, Any]:
    obj = nn.body("node-a", "")
    obj["status"] = status
    return obj


def test_the_record_carries_them_and_reads_back_with_or_without() -> None:
    status = nn.status(report(LOST), heartbeat_seconds=60, wall=1.7e9)
    assert status["lostPorts"] == {"count": 2, "pods": [
        {"namespace": "default", "name": "web-1", "portId": "p2",
         "why": "another MAC"},
        {"namespace": "shop", "name": "db-0", "portId": "p7",
         "why": "OVSDB refuses"}]}
    assert nn.from_object(_record(status)).report.lost == LOST
    older = dict(status)
    del older["lostPorts"]                     # an older node's record
    assert nn.from_object(_record(older)).report.lost == LostPorts()
    assert nn.status(report(), heartbeat_seconds=60, wall=1.7e9)[
        "lostPorts"] == {"count": 0, "pods": []}


@pytest.mark.parametrize(("lost", "why"), [
    ("two", "lostPorts is not an object"),
    ({"count": -1}, "count"),
    ({"count": True}, "count"),
    ({"count": 1, "pods": [{"namespace": "NOT A NAME", "name": "a"}]},
     r"pods\[0\]\.namespace"),
    ({"count": 1, "pods": [{"namespace": "a", "name": "b", "why": 3}]},
     r"pods\[0\]\.why"),
    ({"count": 1, "pods": [{"namespace": "a", "name": "b",
                            "portId": "p" * 65}]}, r"pods\[0\]\.portId"),
    ({"count": 99, "pods": [{"namespace": "a", "name": "b"}] * 65},
     "at most 64"),
])
def test_a_lost_ports_field_that_does_not_hold_up_is_refused(
        lost: Any, why: str) -> None:
    status = nn.status(report(), heartbeat_seconds=60, wall=1.7e9)
    status["lostPorts"] = lost
    with pytest.raises(ValueError, match=why):
        nn.from_object(_record(status))


def test_a_new_count_is_a_change_to_write_a_new_reason_is_not() -> None:
    base = report(LOST)
    assert report(LostPorts(2, (LOST.pods[1], LOST.pods[0]))).signature() \
        == base.signature()
    reworded = LostPorts(2, tuple(LostPort(p.namespace, p.name, p.port_id,
                                           "other words") for p in LOST.pods))
    assert report(reworded).signature() == base.signature()
    assert report(LostPorts(1, LOST.pods[:1])).signature() != \
        base.signature()
    assert report().signature() != base.signature()


def test_the_report_reads_the_board_and_status_ignores_it() -> None:
    state = SharedState.create(multiprocessing.get_context("fork"))
    state.lost_ports.publish(LOST)
    results = {"ovsdb": Result.passed("OVSDB answers")}
    source = ReportSource(
        lambda: Overall(True, True, LiveCause.NONE, 1.0, "live, ready"),
        lambda: results, lost=state.lost_ports.read)
    assert source().lost == LOST
    assert status_answer(results)[0] == 0


def test_status_metrics_and_the_cli_show_them_readiness_does_not() -> None:
    env = Env().healthy()
    env.state.lost_ports.publish(LOST)
    assert env.get("/ready") == (200, "ok\n")
    code, body = env.get("/status")
    doc = json.loads(body)
    assert code == 200 and doc["ready"] is True
    assert doc["network"]["lostPorts"] == LOST.document()
    assert doc["network"]["cniStatus"]["code"] == 0
    _, metrics = env.get("/metrics")
    assert "kuryr_supervisor_pod_ports_lost 2.0" in metrics
    assert "web-1" not in metrics              # no pod names in labels
    text = cli_status.render(doc)
    assert "Network:  2 pod ports LOST" in text
    assert "Lost ports: 2 (the pod has no network; delete it)" in text
    assert "  default/web-1 port p2: another MAC" in text
    shown = cli_status.lost_lines(doc, most=1)
    assert shown[1:] == ["  default/web-1 port p2: another MAC",
                         "  ... and 1 more"]
    env.state.lost_ports.publish(LostPorts())
    doc = json.loads(env.get("/status")[1])
    assert doc["network"]["lostPorts"] == {"count": 0, "pods": []}
    assert "Lost" not in cli_status.render(doc)
    assert "kuryr_supervisor_pod_ports_lost 0.0" in env.get("/metrics")[1]
