"""Health aggregation: check results + the clock → per-check records and a verdict.

Modelled on Calico's ``libcalico-go/lib/health``: each check vouches for
liveness or readiness; a check with no result yet counts as failed; the
overall verdict is a pure function (:func:`verdict`) of the results.

Two sorts of checks (see :mod:`kuryr_supervisor.health.checks.base`):

- I/O checks run only in :meth:`HealthMonitor.run_io`, on the HealthManager's
  timer, into an immutable :class:`Snapshot` that is swapped in whole;
- shared-memory checks run in every :meth:`HealthMonitor.evaluate`, so a
  worker's death or SIGTERM's draining shows on the very next probe.

Invariants: :meth:`~HealthMonitor.evaluate` does no I/O (it is the probe
request path); every state change of a check is logged exactly once (WARNING
when it fails, INFO when it recovers), steady state only at DEBUG; only
:meth:`~HealthMonitor.publish` writes the verdict to shared memory.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from oslo_config import cfg

from kuryr_supervisor.health import processes
from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort
from kuryr_supervisor.health.checks.budgets import CheckerCheck
from kuryr_supervisor.state import Component, LiveCause, SharedState

LOG = logging.getLogger(__name__)

NOT_CHECKED = Result.failed("not checked yet")


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The results of one run of the I/O checks."""

    taken_at: float                 # monotonic (the shared state's clock)
    wall: float                     # epoch seconds, for /status
    results: Mapping[str, Result]


@dataclasses.dataclass(frozen=True)
class CheckView:
    """One check as the probes, /status and /metrics show it."""

    name: str
    kind: Kind
    sort: Sort
    cause: LiveCause
    ok: bool
    message: str
    since: float        # epoch seconds of the last change of ``ok``
    updated_at: float   # epoch seconds of the result shown
    value: float | None = None


@dataclasses.dataclass(frozen=True)
class Verdict:
    live: bool
    ready: bool
    cause: LiveCause
    summary: str


def failing(views: Iterable[CheckView], kind: Kind,
            exclude: Iterable[str] = ()) -> list[CheckView]:
    skipped = set(exclude)
    return [v for v in views
            if v.kind is kind and not v.ok and v.name not in skipped]


def verdict(views: Sequence[CheckView], exclude: Iterable[str] = ()) -> Verdict:
    """The overall state: a pure function of the check results.

    The cause is the highest-priority failing liveness cause, in the order of
    :class:`LiveCause` (restart budget first, a dead component last); a
    failing liveness check that declares no cause counts as COMPONENT, the
    one cause that never makes the master exit.
    """
    excluded = tuple(exclude)
    dead = failing(views, Kind.LIVENESS, excluded)
    unready = failing(views, Kind.READINESS, excluded)
    causes = [v.cause for v in dead if v.cause is not LiveCause.NONE]
    cause = min(causes) if causes else (
        LiveCause.COMPONENT if dead else LiveCause.NONE)
    live_part = ("not live: " + "; ".join(v.message for v in dead)
                 if dead else "live")
    ready_part = ("not ready: " + "; ".join(v.message for v in unready)
                  if unready else "ready")
    return Verdict(live=not dead, ready=not unready, cause=cause,
                   summary=f"{live_part}, {ready_part}")


@dataclasses.dataclass
class _Record:
    ok: bool
    since: float        # epoch seconds, shown
    seen: float         # monotonic time of the result folded in last


@dataclasses.dataclass(frozen=True)
class Report:
    """Every check's view at one instant, and the verdict over them."""

    now: float          # monotonic
    wall: float         # epoch seconds
    started: bool
    checks: tuple[CheckView, ...]
    verdict: Verdict

    def get(self, name: str) -> CheckView | None:
        return next((v for v in self.checks if v.name == name), None)


def _run(check: Check, now: float) -> Result:
    """Run one check; an exception is that check failing, never the monitor's."""
    try:
        return check.run(now)
    except Exception as exc:  # reported as the check's failure
        LOG.debug("health check %s raised", check.name, exc_info=True)
        return Result.failed(f"check raised {type(exc).__name__}: {exc}")


class HealthMonitor:
    """Runs the checks, keeps their records and publishes the verdict."""

    def __init__(self, state: SharedState, conf: cfg.ConfigOpts,
                 checks: Sequence[Check], *,
                 wall: Callable[[], float] = time.time,
                 uss: Callable[[int], int | None] = processes.uss,
                 on_change: Callable[[], None] | None = None) -> None:
        self.state = state
        self._on_change = on_change
        self.conf = conf
        self._wall = wall
        self._uss = uss
        self._created = state.now()
        self._snapshot: Snapshot | None = None
        self.checks: tuple[Check, ...] = (
            *checks, CheckerCheck(conf, self._last_run))
        self._io = [c for c in self.checks if c.sort is Sort.IO]
        self._records: dict[str, _Record] = {}
        self._lock = threading.Lock()
        self._published: tuple[bool, bool] | None = None

    # -- timer side -----------------------------------------------------------
    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    def _last_run(self) -> float:
        snap = self._snapshot
        return snap.taken_at if snap is not None else self._created

    def run_io(self) -> Snapshot:
        """Run every I/O check and measure each worker (the timer's job)."""
        now = self.state.now()
        results = {c.name: _run(c, now) for c in self._io}
        self.measure_workers()
        snap = Snapshot(taken_at=self.state.now(), wall=self._wall(),
                        results=results)
        self._snapshot = snap
        return snap

    def measure_workers(self) -> None:
        """Publish each live worker's USS; the master enforces the limit."""
        for status in self.state.components():
            if status.alive and status.pid > 0:
                figure = self._uss(status.pid)
                if figure is not None:
                    self.state.set_memory(status.component, figure)

    def tick(self) -> Report:
        """One timer cycle: run the I/O checks, then publish the verdict."""
        self.run_io()
        return self.publish()

    def publish(self) -> Report:
        report = self.evaluate(notify=False)
        v = report.verdict
        self.state.publish_overall(live=v.live, ready=v.ready, cause=v.cause,
                                   summary=v.summary)
        if self._published != (v.live, v.ready):
            healthy = v.live and (v.ready or self._published is None)
            level = logging.INFO if healthy else logging.WARNING
            LOG.log(level, "daemon health: %s", v.summary)
            self._published = (v.live, v.ready)
        else:
            LOG.debug("daemon health: %s", v.summary)
        return report

    # -- request side (no I/O) ------------------------------------------------
    def evaluate(self, *, notify: bool = True) -> Report:
        """Every check's current view; shared checks run now, I/O from the
        last snapshot. ``notify``: call ``on_change`` if the verdict differs
        from the one last published."""
        now = self.state.now()
        wall = self._wall()
        snap = self._snapshot
        views = []
        for check in self.checks:
            if check.sort is Sort.IO:
                if snap is not None:
                    result = snap.results.get(check.name, NOT_CHECKED)
                    at, seen = snap.wall, snap.taken_at
                else:
                    result, at, seen = NOT_CHECKED, wall, now
            else:
                result, at, seen = _run(check, now), wall, now
            views.append(self._record(check, result, at, seen))
        checks = tuple(views)
        overall = verdict(checks)
        published = self._published
        if (notify and published is not None and self._on_change is not None
                and published != (overall.live, overall.ready)):
            # A request saw the verdict change (a worker died, the Watcher
            # synced): let the timer publish it now, not a cycle later.
            self._on_change()
        return Report(now=now, wall=wall, started=self.state.ever_ready(),
                      checks=checks, verdict=overall)

    def _record(self, check: Check, result: Result, at: float,
                seen: float) -> CheckView:
        """Fold one result into the check's record; log a change once.

        Results are ordered by the monotonic ``seen``: an evaluation that
        lost a race with a newer one (another request thread) changes nothing,
        and a step of the wall clock cannot freeze the records.
        """
        with self._lock:
            record = self._records.get(check.name)
            if record is None:
                record = self._records[check.name] = _Record(
                    ok=result.ok, since=at, seen=seen)
                self._log_change(check, result, first=True)
            elif seen >= record.seen:
                if record.ok != result.ok:
                    record.ok, record.since = result.ok, at
                    self._log_change(check, result, first=False)
                record.seen = seen
            since = record.since
        return CheckView(name=check.name, kind=check.kind, sort=check.sort,
                         cause=check.cause, ok=result.ok,
                         message=result.message, since=since,
                         updated_at=at, value=result.value)

    def _log_change(self, check: Check, result: Result, *,
                    first: bool) -> None:
        if not result.ok and first and not self.state.ever_ready():
            # Starting up: failing until the workers are up is expected.
            LOG.info("%s check %s not passing yet: %s", check.kind.value,
                     check.name, result.message)
        elif not result.ok:
            LOG.warning("%s check %s failed: %s", check.kind.value,
                        check.name, result.message)
        elif first:
            LOG.debug("%s check %s ok: %s", check.kind.value, check.name,
                      result.message)
        else:
            LOG.info("%s check %s recovered: %s", check.kind.value,
                     check.name, result.message)

    def find(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def component_since(self, component: Component) -> float | None:
        """When the component's liveness check last changed state."""
        with self._lock:
            record = self._records.get(component.label)
            return record.since if record is not None else None
