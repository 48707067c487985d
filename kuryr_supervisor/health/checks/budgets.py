"""Checks on the daemon's budgets and lifecycle flags in shared memory.

Liveness: ``cni-failures`` (consecutive internal ADD failures reached
``[cni_daemon] cni_failures_count``), ``restart-budget`` (the master found more
than ``max_restarts`` restarts in ``restart_window``) and ``checker`` (the
HealthManager's I/O snapshot is older than ``[health] checker_deadline``: the
checker itself is stuck, so every I/O result is unknown).

Readiness: ``server-capacity`` (every CNI request slot is taken) and
``draining`` (SIGTERM received: stop sending work here).

All read shared memory (or the monitor's clock) only and run per request.
"""
from __future__ import annotations

from collections.abc import Callable

from oslo_config import cfg

from kuryr_supervisor.health.checks.base import Check, Kind, Result
from kuryr_supervisor.state import LiveCause, SharedState


class FailureBudgetCheck(Check):
    """Consecutive failures of one kind against their configured limit.

    A subclass names the failures (``what``) and says where the count and the
    limit are; the verdict and its text are the same for every budget.
    """

    kind = Kind.LIVENESS
    what = "failures"

    def __init__(self, state: SharedState, conf: cfg.ConfigOpts) -> None:
        self.state = state
        self.conf = conf

    def count(self) -> int:
        raise NotImplementedError

    def limit(self) -> int:
        raise NotImplementedError

    def run(self, now: float) -> Result:
        count, limit = self.count(), self.limit()
        text = f"{count} consecutive {self.what} (limit {limit})"
        return (Result.failed if count >= limit else Result.passed)(text, count)


class CNIFailuresCheck(FailureBudgetCheck):
    name = "cni-failures"
    cause = LiveCause.CNI_FAILURES
    what = "CNI ADD failures"

    def count(self) -> int:
        return self.state.cni_failures()

    def limit(self) -> int:
        return int(self.conf.cni_daemon.cni_failures_count)


class RestartBudgetCheck(Check):
    name = "restart-budget"
    kind = Kind.LIVENESS
    cause = LiveCause.RESTART_BUDGET

    def __init__(self, state: SharedState, conf: cfg.ConfigOpts) -> None:
        self.state = state
        self.conf = conf

    def run(self, now: float) -> Result:
        opts = self.conf.supervisor
        if self.state.restart_budget_exceeded():
            return Result.failed(
                f"restart budget exceeded: more than {opts.max_restarts} "
                f"worker restarts within {opts.restart_window:g}s")
        return Result.passed()


class CheckerCheck(Check):
    """Fails when the last I/O snapshot is older than ``checker_deadline``.

    ``last_run`` returns the monotonic time of the last snapshot, or of the
    monitor's creation before the first one (a grace period at start-up).
    """

    name = "checker"
    kind = Kind.LIVENESS
    cause = LiveCause.CHECKER_STALE

    def __init__(self, conf: cfg.ConfigOpts,
                 last_run: Callable[[], float]) -> None:
        self.conf = conf
        self._last_run = last_run

    def run(self, now: float) -> Result:
        age = now - self._last_run()
        deadline = float(self.conf.health.checker_deadline)
        if age > deadline:
            return Result.failed(f"checker stale: checks last ran {age:.1f}s "
                                 f"ago (deadline {deadline:g}s)", age)
        return Result.passed(f"checks ran {age:.1f}s ago", age)


class ServerCapacityCheck(Check):
    name = "server-capacity"
    kind = Kind.READINESS

    def __init__(self, state: SharedState) -> None:
        self.state = state

    def run(self, now: float) -> Result:
        inflight, capacity = self.state.server_load()
        if capacity > 0 and inflight >= capacity:
            return Result.failed(
                f"server saturated: {inflight}/{capacity} in flight")
        return Result.passed(f"{inflight}/{capacity} in flight")


class DrainingCheck(Check):
    name = "draining"
    kind = Kind.READINESS

    def __init__(self, state: SharedState) -> None:
        self.state = state

    def run(self, now: float) -> Result:
        if self.state.draining():
            return Result.failed("draining: shutting down after SIGTERM")
        return Result.passed()
