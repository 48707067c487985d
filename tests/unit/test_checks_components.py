"""Worker liveness and ready-flag checks on a real SharedState."""
from __future__ import annotations

import multiprocessing
import signal

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.health.checks.components import (
    ComponentAliveCheck,
    component_state,
    down_reason,
    server_accepting,
    watcher_synced,
)
from kuryr_supervisor.state import Component, Reason, SharedState


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(clock: Clock) -> SharedState:
    return SharedState.create(multiprocessing.get_context("fork"), clock=clock)


@pytest.fixture
def conf() -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([])
    conf.set_override("server_deadline", 3.0, group="supervisor")
    return conf


def test_running_worker_passes(state: SharedState, conf: cfg.ConfigOpts,
                               clock: Clock) -> None:
    state.register(Component.SERVER, 123)
    clock.t += 2.0
    result = ComponentAliveCheck(state, conf, Component.SERVER).run(clock.t)
    assert result.ok
    assert result.message == "server running (pid 123, heartbeat 2.0s ago)"


def test_stale_worker_is_named_with_its_age(state: SharedState,
                                            conf: cfg.ConfigOpts,
                                            clock: Clock) -> None:
    state.register(Component.SERVER, 123)
    clock.t += 3.2
    result = ComponentAliveCheck(state, conf, Component.SERVER).run(clock.t)
    assert not result.ok
    assert result.message == "server stale: no heartbeat for 3.2s (pid 123)"
    state.heartbeat(Component.SERVER)
    assert ComponentAliveCheck(state, conf, Component.SERVER).run(clock.t).ok


def test_deadline_is_read_on_each_run(state: SharedState,
                                      conf: cfg.ConfigOpts,
                                      clock: Clock) -> None:
    check = ComponentAliveCheck(state, conf, Component.SERVER)
    state.register(Component.SERVER, 123)
    clock.t += 5
    assert not check.run(clock.t).ok
    conf.set_override("server_deadline", 6.0, group="supervisor")
    assert check.run(clock.t).ok


def test_killed_worker_is_named_with_the_signal(state: SharedState,
                                                conf: cfg.ConfigOpts,
                                                clock: Clock) -> None:
    """A killed worker the supervisor is restarting does not fail liveness
    (restarting the daemon would heal nothing faster); one not back within
    its deadline plus the restart backoff does."""
    state.register(Component.WATCHER, 7)
    state.count_restart(Component.WATCHER)
    state.mark_down(Component.WATCHER, Reason.KILLED, -signal.SIGKILL)
    check = ComponentAliveCheck(state, conf, Component.WATCHER)
    result = check.run(clock.t)
    assert result.ok
    assert result.message == ("watcher dead: killed by SIGKILL, restarting "
                              "(restart #1, within the restart budget)")
    grace = conf.supervisor.watcher_deadline + \
        conf.supervisor.restart_backoff_max
    assert check.run(clock.t + grace).ok
    late = check.run(clock.t + grace + 0.1)
    assert not late.ok
    assert late.message == (f"watcher dead: killed by SIGKILL, not back "
                            f"within {grace:g}s")


def test_a_worker_killed_for_its_deadline_fails_liveness(
        state: SharedState, conf: cfg.ConfigOpts, clock: Clock) -> None:
    """A missed deadline is not healed by the kill alone."""
    state.register(Component.SERVER, 7)
    state.mark_down(Component.SERVER, Reason.STALE, -signal.SIGKILL)
    result = ComponentAliveCheck(state, conf, Component.SERVER).run(clock.t)
    assert not result.ok
    assert result.message == ("server dead: killed after missing its "
                              "heartbeat deadline, restarting")


@pytest.mark.parametrize("reason,code,text", [
    (Reason.EXITED, 3, "exited with status 3"),
    (Reason.EXITED, -15, "killed by SIGTERM"),
    (Reason.STALE, -9, "killed after missing its heartbeat deadline"),
    (Reason.MEMORY, 0, "restarted for passing max_worker_memory"),
    (Reason.KILLED, -99, "killed by signal 99"),
])
def test_down_reasons(state: SharedState, reason: Reason, code: int,
                      text: str) -> None:
    state.register(Component.WATCHER, 7)
    state.mark_down(Component.WATCHER, reason, code)
    assert down_reason(state.component(Component.WATCHER)) == text


def test_not_started(state: SharedState, conf: cfg.ConfigOpts) -> None:
    result = ComponentAliveCheck(state, conf, Component.HEALTH).run(0.0)
    assert not result.ok
    assert result.message == "health not started yet"


def test_stopping_while_draining_is_not_a_death(state: SharedState,
                                                conf: cfg.ConfigOpts) -> None:
    state.register(Component.SERVER, 5)
    state.mark_down(Component.SERVER, Reason.STOPPING)
    check = ComponentAliveCheck(state, conf, Component.SERVER)
    # Stopped without a shutdown: restarted, dead once overdue.
    assert "restarting" in check.run(0.0).message
    assert not check.run(1e6).ok
    state.set_draining()
    result = check.run(0.0)
    assert result.ok
    assert result.message == "server stopped (draining)"


def test_no_restart_promised_while_draining(state: SharedState,
                                            conf: cfg.ConfigOpts) -> None:
    state.register(Component.SERVER, 5)
    state.mark_down(Component.SERVER, Reason.KILLED, -signal.SIGKILL)
    state.set_draining()
    result = ComponentAliveCheck(state, conf, Component.SERVER).run(0.0)
    assert result.message == "server dead: killed by SIGKILL"


def test_component_state_words(state: SharedState, clock: Clock) -> None:
    def word() -> str:
        return component_state(state.component(Component.SERVER), 3.0, clock.t)
    assert word() == "starting"
    state.register(Component.SERVER, 1)
    assert word() == "running"
    clock.t += 4
    assert word() == "stale"
    state.mark_down(Component.SERVER, Reason.STALE, -9)
    assert word() == "dead"
    state.mark_down(Component.SERVER, Reason.STOPPING)
    assert word() == "stopped"


def test_ready_flags(state: SharedState) -> None:
    synced = watcher_synced(state)
    assert synced.name == "watcher-synced"
    result = synced.run(0.0)
    assert not result.ok
    assert result.message == "watcher not running: not started yet"
    state.register(Component.WATCHER, 9)
    assert synced.run(0.0).message == "watcher has not finished its first list"
    state.set_ready(Component.WATCHER, True)
    assert synced.run(0.0).ok
    state.mark_down(Component.WATCHER, Reason.KILLED, -9)
    assert synced.run(0.0).message == "watcher not running: killed by SIGKILL"


def test_server_accepting(state: SharedState) -> None:
    accepting = server_accepting(state)
    state.register(Component.SERVER, 9)
    result = accepting.run(0.0)
    assert (result.ok, result.message) == (
        False, "server is not accepting CNI requests yet")
    state.set_ready(Component.SERVER, True)
    assert accepting.run(0.0).ok
