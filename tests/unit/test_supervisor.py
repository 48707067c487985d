"""The master's decisions, as a pure function of state, history and clock."""
from __future__ import annotations

import multiprocessing

import pytest

from kuryr_supervisor.exitcodes import ExitCode
from kuryr_supervisor.master.supervisor import (
    MIB,
    Limits,
    RestartLedger,
    Verb,
    classify_death,
    inspect,
)
from kuryr_supervisor.state import (
    CNI_COMPONENTS,
    Component,
    LiveCause,
    Overall,
    Reason,
    SharedState,
    WorkerKind,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def limits(**kw: object) -> Limits:
    base: dict[str, object] = dict(
        policy="restart", max_restarts=2, restart_window=60.0, backoff_max=2.0,
        deadlines={k: 5.0 for k in WorkerKind}, max_worker_memory=0,
        checker_deadline=10.0)
    base.update(kw)
    return Limits(**base)  # type: ignore[arg-type]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(clock: Clock) -> SharedState:
    st = SharedState.create(multiprocessing.get_context("fork"), clock=clock)
    for pid, comp in enumerate(CNI_COMPONENTS, start=100):
        st.register(comp, pid)
    return st


LIVE = Overall(live=True, ready=True, cause=LiveCause.NONE, checked_at=1000.0,
               summary="live, ready")


def test_fresh_workers_need_nothing(state: SharedState, clock: Clock) -> None:
    clock.now += 4.9
    assert inspect(state.components(), LIVE, False, limits(), clock.now) == []


def test_stale_worker_is_named_and_killed(state: SharedState, clock: Clock) -> None:
    clock.now += 3
    state.heartbeat(Component.WATCHER)
    state.heartbeat(Component.HEALTH)
    clock.now += 2.5  # server: 5.5 s without heartbeat, others 2.5 s
    actions = inspect(state.components(), LIVE, False, limits(), clock.now)
    assert [(a.verb, a.component, a.pid) for a in actions] == [
        (Verb.KILL_STALE, Component.SERVER, 101)]
    assert "server stale: no heartbeat for 5.5s" in actions[0].why


def test_dead_worker_is_left_to_cotyledon(state: SharedState, clock: Clock) -> None:
    state.mark_down(Component.SERVER, Reason.KILLED, -9)
    clock.now += 60
    actions = inspect(state.components(), LIVE, False, limits(), clock.now)
    assert Component.SERVER not in {a.component for a in actions}


def test_memory_hog_is_recycled(state: SharedState, clock: Clock) -> None:
    state.set_memory(Component.WATCHER, 300 * MIB)
    state.set_memory(Component.SERVER, 100 * MIB)
    actions = inspect(state.components(), LIVE, False,
                      limits(max_worker_memory=200 * MIB), clock.now)
    assert [(a.verb, a.component) for a in actions] == [
        (Verb.RECYCLE, Component.WATCHER)]
    assert "300 MiB" in actions[0].why


def test_health_manager_is_never_recycled_for_memory(state: SharedState,
                                                     clock: Clock) -> None:
    """A max_worker_memory below the HealthManager's size would restart it
    for ever and leave /status silent; it is exempt."""
    for comp in CNI_COMPONENTS:
        state.set_memory(comp, 300 * MIB)
    actions = inspect(state.components(), LIVE, False,
                      limits(max_worker_memory=10 * MIB), clock.now)
    assert Component.HEALTH not in {a.component for a in actions}
    assert {a.component for a in actions} == {Component.WATCHER,
                                              Component.SERVER}


def test_exit_policy_exits_on_budget(state: SharedState, clock: Clock) -> None:
    acts = inspect(state.components(), LIVE, True, limits(policy="exit"), clock.now)
    assert [(a.verb, a.code) for a in acts] == [(Verb.EXIT, ExitCode.RESTART_BUDGET)]
    assert inspect(state.components(), LIVE, True, limits(), clock.now) == []


@pytest.mark.parametrize("cause,code", [
    (LiveCause.CNI_FAILURES, ExitCode.CNI_FAILURES),
    (LiveCause.MEMORY, ExitCode.MEMORY),
    (LiveCause.NETLINK, ExitCode.NETLINK),
])
def test_exit_policy_exits_per_cause(state: SharedState, clock: Clock,
                                     cause: LiveCause, code: ExitCode) -> None:
    verdict = Overall(live=False, ready=False, cause=cause,
                      checked_at=clock.now, summary="not live")
    acts = inspect(state.components(), verdict, False, limits(policy="exit"), clock.now)
    assert [(a.verb, a.code) for a in acts] == [(Verb.EXIT, code)]
    # a component cause is the restart ladder's job, not an exit
    verdict = Overall(live=False, ready=False, cause=LiveCause.COMPONENT,
                      checked_at=clock.now, summary="server dead")
    assert inspect(state.components(), verdict, False, limits(policy="exit"),
                   clock.now) == []


def test_exit_policy_ignores_an_old_verdict(state: SharedState, clock: Clock) -> None:
    verdict = Overall(live=False, ready=False, cause=LiveCause.MEMORY,
                      checked_at=clock.now - 30, summary="old")
    for comp in CNI_COMPONENTS:
        state.heartbeat(comp)
    assert inspect(state.components(), verdict, False, limits(policy="exit"),
                   clock.now) == []


def test_ledger_budget_and_window() -> None:
    ledger, lim = RestartLedger(), limits(max_restarts=2, restart_window=60.0)
    for t in (0.0, 1.0):
        ledger.record(Component.SERVER, t)
    assert not ledger.exhausted(1.0, lim)
    ledger.record(Component.WATCHER, 2.0)
    assert ledger.exhausted(2.0, lim)
    assert not ledger.exhausted(61.5, lim)  # the first two aged out


def test_ledger_backoff_doubles_to_its_cap() -> None:
    ledger, lim = RestartLedger(), limits(backoff_max=1.0)
    delays = []
    for t in range(6):
        ledger.record(Component.SERVER, float(t))
        delays.append(ledger.backoff(Component.SERVER, float(t), lim))
    assert delays == [0.0, 0.25, 0.5, 1.0, 1.0, 1.0]
    ledger.record(Component.HEALTH, 6.0)
    assert ledger.backoff(Component.HEALTH, 6.0, lim) == 0.0


def test_classify_death() -> None:
    assert classify_death(-9, None) is Reason.KILLED
    assert classify_death(1, None) is Reason.EXITED
    assert classify_death(-9, Reason.STALE) is Reason.STALE


def test_shared_state_budget_counts(state: SharedState) -> None:
    assert [state.record_cni_failure() for _ in range(3)] == [1, 2, 3]
    state.record_cni_success()
    assert state.cni_failures() == 0
    assert state.count_restart(Component.SERVER) == 1
    assert state.component(Component.SERVER).restarts == 1


def test_shared_state_crosses_fork(state: SharedState) -> None:
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=state.record_cni_failure)
    proc.start()
    proc.join(10)
    assert state.cni_failures() == 1


def test_summary_is_truncated_not_overflowed(state: SharedState) -> None:
    state.publish_overall(live=False, ready=False, cause=LiveCause.MEMORY,
                          summary="x" * 1000)
    got = state.overall()
    assert got.summary == "x" * 255 and got.cause is LiveCause.MEMORY
    assert not state.ever_ready()
