"""Aggregation: records, transitions, the verdict and its publication."""
from __future__ import annotations

import logging
import multiprocessing
import signal

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.health.checks import default_checks
from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort
from kuryr_supervisor.health.monitor import CheckView, HealthMonitor, verdict
from kuryr_supervisor.state import CNI_COMPONENTS, Component, LiveCause, Reason, SharedState


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Settable(Check):
    """A check whose result the test sets; counts its runs."""

    def __init__(self, name: str, kind: Kind = Kind.LIVENESS,
                 sort: Sort = Sort.SHARED,
                 cause: LiveCause = LiveCause.NONE) -> None:
        self.name, self.kind, self.sort, self.cause = name, kind, sort, cause
        self.result = Result.passed()
        self.runs = 0

    def run(self, now: float) -> Result:
        self.runs += 1
        return self.result


class Raising(Check):
    name = "raising"
    kind = Kind.READINESS

    def run(self, now: float) -> Result:
        raise ValueError("boom")


@pytest.fixture
def mono() -> Clock:
    return Clock(500.0)


@pytest.fixture
def wall() -> Clock:
    return Clock(1_800_000_000.0)


@pytest.fixture
def state(mono: Clock) -> SharedState:
    return SharedState.create(multiprocessing.get_context("fork"), clock=mono)


@pytest.fixture
def conf() -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([])
    return conf


def monitor(state: SharedState, conf: cfg.ConfigOpts, checks: list[Check],
            wall: Clock, uss=lambda pid: None) -> HealthMonitor:
    return HealthMonitor(state, conf, checks, wall=wall, uss=uss)


def view(name: str, kind: Kind, ok: bool, cause: LiveCause = LiveCause.NONE,
         message: str = "") -> CheckView:
    return CheckView(name=name, kind=kind, sort=Sort.SHARED, cause=cause,
                     ok=ok, message=message or f"{name} msg", since=0.0,
                     updated_at=0.0)


def test_verdict_is_a_pure_function_of_views() -> None:
    views = [
        view("server", Kind.LIVENESS, False, LiveCause.COMPONENT,
             "server stale: no heartbeat for 3.2s (pid 123)"),
        view("memory", Kind.LIVENESS, False, LiveCause.MEMORY, "memory high"),
        view("netlink", Kind.LIVENESS, True, LiveCause.NETLINK),
        view("draining", Kind.READINESS, False, message="draining"),
    ]
    result = verdict(views)
    assert (result.live, result.ready) == (False, False)
    assert result.cause is LiveCause.MEMORY     # before COMPONENT
    assert result.summary == ("not live: server stale: no heartbeat for 3.2s "
                              "(pid 123); memory high, not ready: draining")
    assert verdict(views) == result
    only = verdict(views, exclude=["memory", "draining"])
    assert only.cause is LiveCause.COMPONENT
    assert only.ready
    assert verdict(views[2:3]).summary == "live, ready"


def test_restart_budget_outranks_everything() -> None:
    causes = [LiveCause.COMPONENT, LiveCause.CHECKER_STALE, LiveCause.NETLINK,
              LiveCause.RESTART_BUDGET, LiveCause.CNI_FAILURES]
    views = [view(c.name, Kind.LIVENESS, False, c) for c in causes]
    assert verdict(views).cause is LiveCause.RESTART_BUDGET


def test_io_checks_run_on_the_timer_only(state: SharedState,
                                         conf: cfg.ConfigOpts,
                                         wall: Clock) -> None:
    io = Settable("netlink", sort=Sort.IO, cause=LiveCause.NETLINK)
    shared = Settable("cheap")
    mon = monitor(state, conf, [io, shared], wall)
    first = mon.evaluate().get("netlink")
    assert first is not None
    assert (first.ok, first.message) == (False, "not checked yet")
    mon.run_io()
    for _ in range(5):
        assert mon.evaluate().get("netlink").ok  # type: ignore[union-attr]
    assert io.runs == 1
    assert shared.runs == 6


def test_failure_shows_on_the_next_request(state: SharedState,
                                           conf: cfg.ConfigOpts,
                                           wall: Clock) -> None:
    for comp in CNI_COMPONENTS:
        state.register(comp, 100 + comp.slot)
    mon = monitor(state, conf, default_checks(state, conf, 1,
                                              probe=lambda: None), wall)
    mon.tick()
    assert mon.evaluate().get("watcher").ok  # type: ignore[union-attr]
    state.mark_down(Component.WATCHER, Reason.KILLED, -signal.SIGKILL)
    report = mon.evaluate()                  # no tick in between
    # Being restarted: still live, not ready, and readiness says why.
    assert report.verdict.live and not report.verdict.ready
    assert "watcher not running: killed by SIGKILL" in report.verdict.summary
    state.mark_down(Component.WATCHER, Reason.STALE, -signal.SIGKILL)
    report = mon.evaluate()                  # a missed deadline: not live
    assert not report.verdict.live
    assert report.verdict.cause is LiveCause.COMPONENT
    assert "watcher dead: killed after missing" in report.verdict.summary
    state.register(Component.WATCHER, 200)
    assert mon.evaluate().get("watcher").ok  # type: ignore[union-attr]
    state.set_draining()
    assert not mon.evaluate().verdict.ready


def test_since_moves_only_on_change(state: SharedState, conf: cfg.ConfigOpts,
                                    wall: Clock) -> None:
    check = Settable("x")
    mon = monitor(state, conf, [check], wall)
    start = wall.t
    mon.evaluate()
    wall.t += 5
    same = mon.evaluate().get("x")
    assert same is not None
    assert (same.since, same.updated_at) == (start, start + 5)
    check.result = Result.failed("broken")
    wall.t += 5
    changed = mon.evaluate().get("x")
    assert changed is not None
    assert (changed.ok, changed.since) == (False, start + 10)
    wall.t += 5
    still = mon.evaluate().get("x")
    assert still is not None
    assert (still.since, still.updated_at) == (start + 10, start + 15)


def test_io_results_carry_the_snapshot_time(state: SharedState,
                                            conf: cfg.ConfigOpts,
                                            wall: Clock) -> None:
    mon = monitor(state, conf, [Settable("io", sort=Sort.IO)], wall)
    mon.run_io()
    taken = wall.t
    wall.t += 3
    shown = mon.evaluate().get("io")
    assert shown is not None
    assert shown.updated_at == taken


def test_each_transition_is_logged_once(state: SharedState,
                                        conf: cfg.ConfigOpts, wall: Clock,
                                        caplog: pytest.LogCaptureFixture
                                        ) -> None:
    check = Settable("x")
    mon = monitor(state, conf, [check], wall)
    caplog.set_level(logging.DEBUG, logger="kuryr_supervisor.health.monitor")
    mon.evaluate()
    check.result = Result.failed("down: 1")
    for n in range(10):
        check.result = Result.failed(f"down: {n}")  # message changes, state not
        mon.evaluate()
    check.result = Result.passed("back")
    for _ in range(10):
        mon.evaluate()
    records = [(r.levelno, r.getMessage()) for r in caplog.records
               if "check x" in r.getMessage()
               and r.levelno > logging.DEBUG]
    assert records == [
        (logging.WARNING, "liveness check x failed: down: 0"),
        (logging.INFO, "liveness check x recovered: back"),
    ]


def test_a_raising_check_fails_alone(state: SharedState, conf: cfg.ConfigOpts,
                                     wall: Clock) -> None:
    mon = monitor(state, conf, [Raising(), Settable("fine")], wall)
    report = mon.evaluate()
    bad = report.get("raising")
    assert bad is not None
    assert (bad.ok, bad.message) == (False, "check raised ValueError: boom")
    assert report.get("fine").ok  # type: ignore[union-attr]
    assert report.verdict.live and not report.verdict.ready


def test_publish_writes_the_verdict(state: SharedState, conf: cfg.ConfigOpts,
                                    wall: Clock, mono: Clock) -> None:
    netlink = Settable("netlink", sort=Sort.IO, cause=LiveCause.NETLINK)
    ready = Settable("synced", kind=Kind.READINESS)
    ready.result = Result.failed("not synced")
    mon = monitor(state, conf, [netlink, ready], wall)
    mon.tick()
    overall = state.overall()
    assert (overall.live, overall.ready, overall.cause) == (
        True, False, LiveCause.NONE)
    assert overall.summary == "live, not ready: not synced"
    assert overall.checked_at == mono.t
    assert not state.ever_ready()
    ready.result = Result.passed()
    netlink.result = Result.failed("netlink unusable: EPERM")
    mon.tick()
    overall = state.overall()
    assert (overall.live, overall.ready, overall.cause) == (
        False, True, LiveCause.NETLINK)
    assert overall.summary == "not live: netlink unusable: EPERM, ready"
    assert state.ever_ready()


def test_checker_goes_stale_without_runs(state: SharedState,
                                         conf: cfg.ConfigOpts, wall: Clock,
                                         mono: Clock) -> None:
    mon = monitor(state, conf, [], wall)
    assert mon.evaluate().verdict.live          # grace from creation
    mono.t += 11
    report = mon.evaluate()
    assert report.verdict.cause is LiveCause.CHECKER_STALE
    mon.run_io()
    assert mon.evaluate().verdict.live
    conf.set_override("checker_deadline", 2.0, group="health")
    mono.t += 3
    assert not mon.evaluate().verdict.live      # the new deadline applies


def test_worker_memory_is_published(state: SharedState, conf: cfg.ConfigOpts,
                                    wall: Clock) -> None:
    state.register(Component.WATCHER, 11)
    state.register(Component.SERVER, 22)
    state.mark_down(Component.SERVER, Reason.KILLED, -9)
    asked: list[int] = []

    def uss(pid: int) -> int | None:
        asked.append(pid)
        return pid * 1000
    mon = monitor(state, conf, [], wall, uss=uss)
    mon.run_io()
    assert asked == [11]          # dead and never-started slots are skipped
    assert state.component(Component.WATCHER).memory == 11000
    assert state.component(Component.SERVER).memory == 0


def test_default_checks_and_extra_hook(state: SharedState,
                                       conf: cfg.ConfigOpts,
                                       wall: Clock) -> None:
    api = Settable("k8s-api", kind=Kind.READINESS, sort=Sort.IO)
    checks = default_checks(state, conf, 1, extra=[api])
    mon = monitor(state, conf, checks, wall)
    names = {k: [c.name for c in mon.checks if c.kind is k] for k in Kind}
    assert names[Kind.LIVENESS] == [
        "netlink", "watcher", "server", "health", "cni-failures", "memory",
        "restart-budget", "checker"]
    assert names[Kind.READINESS] == [
        "net-admin", "watcher-synced", "server-accepting", "cni-environment",
        "cni-install", "server-capacity",
        "draining", "k8s-api"]
    api.result = Result.failed("k8s API unreachable")
    mon.run_io()
    report = mon.evaluate()
    assert report.verdict.summary.endswith("k8s API unreachable")
    with pytest.raises(ValueError, match="duplicate check names"):
        default_checks(state, conf, 1, extra=[Settable("memory")])


def test_start_up_failures_are_not_warnings(state: SharedState,
                                            conf: cfg.ConfigOpts, wall: Clock,
                                            caplog: pytest.LogCaptureFixture
                                            ) -> None:
    synced = Settable("synced", kind=Kind.READINESS)
    synced.result = Result.failed("first list not done")
    mon = monitor(state, conf, [synced], wall)
    caplog.set_level(logging.INFO, logger="kuryr_supervisor.health.monitor")
    mon.publish()
    assert [r.levelno for r in caplog.records] == [logging.INFO] * 2
    synced.result = Result.passed()
    mon.publish()
    caplog.clear()
    synced.result = Result.failed("relisting")
    mon.publish()                      # a regression after being ready
    assert [r.levelno for r in caplog.records] == [logging.WARNING] * 2


def test_a_change_seen_by_a_request_wakes_the_timer(state: SharedState,
                                                    conf: cfg.ConfigOpts,
                                                    wall: Clock) -> None:
    woken: list[int] = []
    check = Settable("x")
    mon = HealthMonitor(state, conf, [check], wall=wall,
                        on_change=lambda: woken.append(1))
    mon.evaluate()
    assert woken == []                 # nothing published yet to differ from
    mon.publish()
    mon.evaluate()
    assert woken == []                 # same verdict as published
    check.result = Result.failed("down")
    mon.evaluate()
    assert woken == [1]
    mon.publish()
    mon.evaluate()
    assert woken == [1]


def test_a_wall_clock_step_back_does_not_freeze_records(
        state: SharedState, conf: cfg.ConfigOpts, wall: Clock,
        mono: Clock) -> None:
    check = Settable("x")
    mon = monitor(state, conf, [check], wall)
    mon.evaluate()
    wall.t -= 3600                     # NTP steps the clock back an hour
    mono.t += 1
    check.result = Result.failed("down")
    shown = mon.evaluate().get("x")
    assert shown is not None
    assert (shown.ok, shown.since) == (False, wall.t)


def test_checker_deadline_must_exceed_the_interval(conf: cfg.ConfigOpts
                                                    ) -> None:
    conf_mod.validate(conf)
    conf.set_override("check_interval", 10.0, group="health")
    with pytest.raises(conf_mod.ConfigError, match="checker_deadline"):
        conf_mod.validate(conf)
