"""I/O checks off the HealthManager's loop: a hung check never holds a
cycle, fails named once past its deadline, is never started twice, and its
late answer is the next result (real threads, the monitor's clock faked)."""
from __future__ import annotations

import multiprocessing
import threading
import time

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort
from kuryr_supervisor.health.monitor import HealthMonitor
from kuryr_supervisor.health.runner import Offloaded
from kuryr_supervisor.state import CNI_COMPONENTS, SharedState


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Blocking(Check):
    """An I/O readiness check that waits on ``gate`` (a hung dependency)
    while it is clear; counts its runs."""

    kind = Kind.READINESS
    sort = Sort.IO

    def __init__(self, name: str, own: float | None = None) -> None:
        self.name = name
        self.gate = threading.Event()
        self.gate.set()
        self.runs = 0
        self.result = Result.passed("answers")
        self._own = own

    def timeout(self) -> float | None:
        return self._own

    def run(self, now: float) -> Result:
        self.runs += 1
        self.gate.wait(30)
        return self.result


@pytest.fixture
def mono() -> Clock:
    return Clock(100.0)


@pytest.fixture
def conf() -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([], default_config_files=[])
    return conf


@pytest.fixture
def state(mono: Clock) -> SharedState:
    return SharedState.create(multiprocessing.get_context("fork"),
                              active=CNI_COMPONENTS, clock=mono)


def threads(name: str) -> int:
    return sum(t.name == f"check-{name}" for t in threading.enumerate())


def test_a_hung_check_never_holds_the_cycle(state: SharedState,
                                            conf: cfg.ConfigOpts,
                                            mono: Clock) -> None:
    ovsdb = Blocking("ovsdb", own=5.0)
    fine = Blocking("fine")
    woken = threading.Event()
    mon = HealthMonitor(state, conf, [ovsdb, fine], on_change=woken.set)
    try:
        mon.tick()                       # both answer: no wait at all
        assert mon.evaluate().get("ovsdb").ok  # type: ignore[union-attr]
        ovsdb.gate.clear()               # ovsdb-server stops answering
        for _ in range(6):
            began = time.monotonic()
            report = mon.tick(wait=0.05)
            assert time.monotonic() - began < 0.5
            mono.t += 1.0
        # Within its deadline the last answer stands; past it, it fails
        # named, and only readiness: the checker itself is not stale.
        report = mon.evaluate()
        view = report.get("ovsdb")
        assert view is not None and not view.ok
        assert view.message == "ovsdb: no answer within 5 s"
        assert report.verdict.live and not report.verdict.ready
        assert report.get("checker").ok  # type: ignore[union-attr]
        assert report.get("fine").ok  # type: ignore[union-attr]
        assert fine.runs == 7
        assert ovsdb.runs == 2           # the hung run is never doubled
        assert threads("ovsdb") == 1
        # Its answer, when it comes, wakes the timer and is the result.
        woken.clear()
        ovsdb.result = Result.failed("OVSDB refused")
        ovsdb.gate.set()
        assert woken.wait(5)
        view = mon.evaluate().get("ovsdb")
        assert view is not None and view.message == "OVSDB refused"
    finally:
        ovsdb.gate.set()
        mon.close()


def test_the_deadline_is_the_checks_own_else_check_timeout(
        state: SharedState, conf: cfg.ConfigOpts, mono: Clock) -> None:
    plain = Blocking("plain")
    mon = HealthMonitor(state, conf, [plain])
    try:
        assert mon.deadline(plain) == 5.0
        conf.set_override("check_timeout", 2.0, group="health")
        assert mon.deadline(plain) == 2.0       # re-read: SIGHUP applies
        assert mon.deadline(Blocking("own", own=0.5)) == 0.5
        plain.gate.clear()
        mon.tick(wait=0.0)
        mono.t += 1.5
        view = mon.evaluate().get("plain")
        assert view is not None and view.message == "not checked yet"
        mono.t += 1.0
        view = mon.evaluate().get("plain")
        assert view is not None
        assert view.message == "plain: no answer within 2 s"
    finally:
        plain.gate.set()
        mon.close()


def test_offloaded_runs_the_latest_only_and_never_blocks() -> None:
    gate = threading.Event()
    seen: list[int] = []
    done = threading.Event()

    def slow(n: int) -> None:
        gate.wait(10)
        seen.append(n)
        if n == 9:
            done.set()
    worker = Offloaded(slow, "slow")
    try:
        began = time.monotonic()
        for n in range(10):
            worker.submit(n)
            time.sleep(0.01 if n == 0 else 0)
        assert time.monotonic() - began < 0.5
        gate.set()
        assert done.wait(5)
        assert seen == [0, 9]            # the ones in between replaced
    finally:
        gate.set()
        worker.close()
