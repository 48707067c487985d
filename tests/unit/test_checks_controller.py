"""The controller role's checks over per-handler slots, on a real
SharedState: liveness per handler, budget and readiness over all of them."""
from __future__ import annotations

import multiprocessing

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.health.checks.controller import (
    HandlerFailuresCheck,
    HandlersSyncedCheck,
    controller_checks,
)
from kuryr_supervisor.master.supervisor import Limits, Verb, inspect
from kuryr_supervisor.state import (
    Component,
    LiveCause,
    Overall,
    Reason,
    SharedState,
    WorkerKind,
    controller_components,
)


@pytest.fixture
def conf() -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override("handler_failures_count", 3, "controller")
    return conf


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(clock: Clock) -> SharedState:
    st = SharedState.create(multiprocessing.get_context("fork"), clock=clock,
                            active=controller_components(["ports", "extra"]))
    for pid, comp in enumerate(st.active, start=500):
        st.register(comp, pid)
    return st


def handlers(state: SharedState) -> tuple[Component, ...]:
    return state.of_kind(WorkerKind.HANDLER)


def test_each_handler_has_a_liveness_check_named_after_it(
        state: SharedState, conf: cfg.ConfigOpts) -> None:
    checks = {c.name: c for c in controller_checks(state, conf, 1)}
    assert {"handler:ports", "handler:extra", "health", "handler-failures",
            "handler-synced"} <= set(checks)
    ports, extra = handlers(state)
    state.mark_down(extra, Reason.KILLED, -9)
    now = state.now()
    assert checks["handler:ports"].run(now).ok
    # Killed and being restarted within the budget: named, still alive.
    result = checks["handler:extra"].run(now)
    assert result.ok
    assert result.message == ("handler:extra dead: killed by SIGKILL, "
                              "restarting (restart #0, within the restart "
                              "budget)")
    # Killed for missing its heartbeat deadline: a fault of its own.
    state.mark_down(extra, Reason.STALE, -9)
    result = checks["handler:extra"].run(now)
    assert not result.ok
    assert result.message == ("handler:extra dead: killed after missing its "
                              "heartbeat deadline, restarting")
    assert checks["handler:ports"].run(now).ok


def test_failure_budget_is_each_handlers_own(state: SharedState,
                                              conf: cfg.ConfigOpts) -> None:
    check = HandlerFailuresCheck(state, conf)
    assert check.cause is LiveCause.HANDLER_FAILURES
    ports, extra = handlers(state)
    for _ in range(2):
        state.record_handler_failure(ports)
        state.record_handler_failure(extra)
    assert check.run(0.0).ok               # 2 and 2: neither reached 3
    state.record_handler_failure(extra)
    state.record_handler_success(ports)    # resets ports only
    result = check.run(0.0)
    assert not result.ok and result.value == 3
    assert result.message == ("3 consecutive handler failures (limit 3): "
                              "extra 3")
    assert state.handler_failures() == {ports: 0, extra: 3}


def test_synced_waits_for_every_handler_and_names_them(
        state: SharedState) -> None:
    check = HandlersSyncedCheck(state)
    ports, extra = handlers(state)
    result = check.run(0.0)
    assert not result.ok
    assert result.message == ("ports has not caught up yet; extra has not "
                              "caught up yet")
    state.set_ready(ports, True)
    state.set_ready(extra, True)
    assert check.run(0.0).ok
    state.mark_down(extra, Reason.STALE)
    assert check.run(0.0).message == ("extra not running: killed after "
                                      "missing its heartbeat deadline")


def test_supervisor_kills_the_stale_handler_alone(
        state: SharedState, conf: cfg.ConfigOpts, clock: Clock) -> None:
    conf.set_override("handler_deadline", 1.0, "supervisor")
    conf.set_override("health_deadline", 60.0, "supervisor")
    ports, extra = handlers(state)
    clock.now += 5.0
    now = clock.now
    state.heartbeat(ports)                      # extra's last beat: 5 s ago
    live = Overall(live=True, ready=True, cause=LiveCause.NONE,
                   checked_at=now, summary="")
    actions = inspect(state.components(), live, False,
                      Limits.from_conf(conf), now)
    assert [(a.verb, a.component, a.pid) for a in actions] == [
        (Verb.KILL_STALE, extra, 501)]
    assert actions[0].why.startswith("handler:extra stale: no heartbeat for "
                                     "5.0s (deadline 1s")


def test_openstack_check_bounded_by_its_deadline(conf: cfg.ConfigOpts
                                                 ) -> None:
    """A probe that hangs: the monitor's cycle returns at once, the check
    fails within its deadline naming the wait, and no second probe starts
    while the first hangs; its late answer is the next result."""
    import threading
    import time as _time

    from kuryr_supervisor.health.monitor import HealthMonitor
    from kuryr_supervisor.master.roles.dependencies import KeystoneCheck

    release = threading.Event()
    calls: list[int] = []

    class Hung:
        def token(self) -> None:
            calls.append(1)
            release.wait(10)
            raise RuntimeError("late")

    check = KeystoneCheck(Hung(), lambda: 0.0, deadline=lambda: 0.2)
    assert check.timeout() == 0.2
    state = SharedState.create(multiprocessing.get_context("fork"),
                               active=controller_components(["x"]))
    mon = HealthMonitor(state, conf, [check])
    try:
        for _ in range(3):
            start = _time.monotonic()
            mon.tick(wait=0.05)
            assert _time.monotonic() - start < 0.5
        _time.sleep(0.25)
        view = mon.evaluate().get("keystone")
        assert view is not None and not view.ok
        assert view.message == "keystone: no answer within 0.2 s"
        assert calls == [1]
        release.set()
        _time.sleep(0.1)
        view = mon.evaluate().get("keystone")
        assert view is not None and not view.ok and "late" in view.message
    finally:
        release.set()
        mon.close()


def test_neutron_ports_check_names_the_full_subnet(conf: cfg.ConfigOpts) -> None:
    """A full subnet fails readiness naming it; a sweep that is off or a
    lost port is said in the message without failing it; a fault cleared
    clears the check."""
    from kuryr_supervisor.health.checks.controller import NeutronPortsCheck
    from kuryr_supervisor.state import Fault
    conf.set_override("pod_subnet_id", "subnet-42", "controller")
    state = SharedState.create(multiprocessing.get_context("fork"),
                               active=controller_components(["neutron_port"]))
    check = NeutronPortsCheck(state, conf)
    assert check.run(0.0).ok and check.run(0.0).message == "ok"
    state.set_fault(Fault.SWEEP_UNPROVEN, True)
    result = check.run(0.0)
    assert result.ok and "the port sweep is off" in result.message
    state.set_fault(Fault.SUBNET_FULL, True)
    result = check.run(0.0)
    assert not result.ok
    assert result.message.startswith("pod subnet subnet-42 has no free address")
    assert "sweep is off" in result.message
    state.set_fault(Fault.SUBNET_FULL, False)
    state.set_fault(Fault.SWEEP_UNPROVEN, False)
    assert check.run(0.0).message == "ok"
