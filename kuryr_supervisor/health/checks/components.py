"""Checks on the workers' slots: alive and heartbeating, and their ready flags.

Liveness ``watcher``, ``server``, ``health`` (controller role: one
``handler:<name>`` per handler process): the component is alive and its
heartbeat is younger than ``[supervisor] <kind>_deadline``, or it died and
the supervisor is restarting it (liveness reflects what the supervisor
cannot heal: a restart within ``restart_backoff_max`` plus the deadline
holds, the restart budget is its own check). A stale worker, or one not
back in time, fails, named with the reason, e.g. ``server stale: no
heartbeat for 3.2s (pid 123)``; a healed one says ``watcher dead: killed by
SIGKILL, restarting (restart #1, within the restart budget)``.

Readiness ``watcher-synced`` and ``server-accepting``: the worker's own ready
flag (the Watcher sets it after its first list, the Server once its socket
accepts).

All read shared memory only, so they run on every probe request.
"""
from __future__ import annotations

import signal

from oslo_config import cfg

from kuryr_supervisor.health.checks.base import Check, Kind, Result
from kuryr_supervisor.state import (
    Component,
    ComponentStatus,
    LiveCause,
    Reason,
    SharedState,
)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def down_reason(status: ComponentStatus) -> str:
    """Why a component that is not alive is down, in words."""
    reason = status.reason
    if reason is Reason.KILLED or (reason is Reason.EXITED
                                   and status.exit_code < 0):
        return f"killed by {_signal_name(-status.exit_code)}"
    if reason is Reason.EXITED:
        return f"exited with status {status.exit_code}"
    if reason is Reason.STALE:
        return "killed after missing its heartbeat deadline"
    if reason is Reason.MEMORY:
        return "restarted for passing max_worker_memory"
    if reason is Reason.STOPPING:
        return "stopped"
    if reason is Reason.NOT_STARTED:
        return "not started yet"
    return "not running"


def component_state(status: ComponentStatus, deadline: float,
                    now: float) -> str:
    """One word for /status: running, stale, dead, starting or stopped."""
    if not status.alive:
        if status.reason is Reason.NOT_STARTED:
            return "starting"
        return "stopped" if status.reason is Reason.STOPPING else "dead"
    return "stale" if status.heartbeat_age(now) > deadline else "running"


def deadline_of(conf: cfg.ConfigOpts, component: Component) -> float:
    return float(getattr(conf.supervisor, f"{component.kind.value}_deadline"))


class ComponentAliveCheck(Check):
    """Liveness of one worker (named after it)."""

    kind = Kind.LIVENESS
    cause = LiveCause.COMPONENT

    def __init__(self, state: SharedState, conf: cfg.ConfigOpts,
                 component: Component) -> None:
        self.state = state
        self.conf = conf
        self.component = component
        self.name = component.label

    def run(self, now: float) -> Result:
        status = self.state.component(self.component)
        label = self.component.label
        if not status.alive:
            why = down_reason(status)
            if status.reason is Reason.STOPPING and self.state.draining():
                return Result.passed(f"{label} {why} (draining)")
            if status.reason is Reason.NOT_STARTED:
                return Result.failed(f"{label} {why}")
            if self.state.draining():
                return Result.failed(f"{label} dead: {why}")
            return self._restarting(status, why, now)
        age = status.heartbeat_age(now)
        deadline = deadline_of(self.conf, self.component)
        if age > deadline:
            return Result.failed(f"{label} stale: no heartbeat for {age:.1f}s "
                                 f"(pid {status.pid})")
        return Result.passed(f"{label} running (pid {status.pid}, "
                             f"heartbeat {age:.1f}s ago)")


    def _restarting(self, status: ComponentStatus, why: str,
                    now: float) -> Result:
        """A worker that died is being restarted by the supervisor: that is
        what liveness exists to get, so it holds while the restart is due
        (the backoff and the worker's deadline to come back). Restarting the
        whole daemon instead would heal nothing faster. It fails when the
        restart is overdue, when the worker was killed for missing its
        deadline (a hang is not healed by a kill alone), and, through the
        ``restart-budget`` check, when restarts exceed the budget."""
        label = self.component.label
        grace = deadline_of(self.conf, self.component) + float(
            self.conf.supervisor.restart_backoff_max)
        down = status.heartbeat_age(now)      # since its last sign of life
        if status.reason is Reason.STALE:
            return Result.failed(f"{label} dead: {why}, restarting")
        if down > grace:
            return Result.failed(f"{label} dead: {why}, not back within "
                                 f"{grace:g}s")
        return Result.passed(f"{label} dead: {why}, restarting (restart "
                             f"#{status.restarts}, within the restart "
                             "budget)")


class ComponentReadyCheck(Check):
    """Readiness from one worker's own ready flag."""

    kind = Kind.READINESS

    def __init__(self, state: SharedState, component: Component, name: str,
                 waiting: str) -> None:
        self.state = state
        self.component = component
        self.name = name
        self._waiting = waiting

    def run(self, now: float) -> Result:
        status = self.state.component(self.component)
        if status.alive and status.ready:
            return Result.passed()
        if not status.alive:
            return Result.failed(f"{self.component.label} not running: "
                                 f"{down_reason(status)}")
        return Result.failed(self._waiting)


def watcher_synced(state: SharedState) -> ComponentReadyCheck:
    return ComponentReadyCheck(state, Component.WATCHER, "watcher-synced",
                               "watcher has not finished its first list")


def server_accepting(state: SharedState) -> ComponentReadyCheck:
    return ComponentReadyCheck(state, Component.SERVER, "server-accepting",
                               "server is not accepting CNI requests yet")
