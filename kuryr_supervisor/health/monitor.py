"""Health aggregation: check results + the clock → per-check records and a verdict.

Modelled on Calico's ``libcalico-go/lib/health``: each check vouches for
liveness or readiness; a check with no result yet counts as failed; the
overall verdict is a pure function (:func:`verdict`) of the results.

Two sorts of checks (see :mod:`kuryr_supervisor.health.checks.base`):

- I/O checks are started only by :meth:`HealthMonitor.run_io`, on the
  HealthManager's timer, each on a thread of its own under its own deadline
  (:mod:`.runner`): the timer waits for them at most ``wait`` seconds, so a
  hung dependency never holds the loop that beats the heartbeat; an
  evaluation shows each one's last outcome (a run past its deadline is that
  check failing, named), and :class:`Snapshot` records when the timer last
  went round (the ``checker`` check);
- shared-memory checks run in every :meth:`HealthMonitor.evaluate`, so a
  worker's death or SIGTERM's draining shows on the very next probe.

Invariants: :meth:`~HealthMonitor.evaluate` does no I/O (it is the probe
request path); every state change of a check is logged exactly once (WARNING
when it fails, INFO when it recovers), steady state only at DEBUG; only
:meth:`~HealthMonitor.publish` writes the verdict to shared memory.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from oslo_config import cfg

from kuryr_supervisor.health import processes
from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort
from kuryr_supervisor.health.checks.budgets import CheckerCheck
from kuryr_supervisor.health.runner import CheckRunner, Outcome, run_check
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
        self._runners = {
            c.name: CheckRunner(c, functools.partial(self.deadline, c),
                                clock=state.now, wall=wall,
                                on_done=self._io_done)
            for c in self.checks if c.sort is Sort.IO}
        self._records: dict[str, _Record] = {}
        self._lock = threading.Lock()
        self._published: tuple[bool, bool] | None = None
        #: The report last published (None before the first).
        self.last: Report | None = None

    # -- timer side -----------------------------------------------------------
    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    def _last_run(self) -> float:
        snap = self._snapshot
        return snap.taken_at if snap is not None else self._created

    def deadline(self, check: Check) -> float:
        """Seconds a run of ``check`` may take (its own bound, else
        ``[health] check_timeout``; read at every look: SIGHUP)."""
        own = check.timeout()
        return float(own if own is not None
                     else self.conf.health.check_timeout)

    def _io_done(self) -> None:
        """A check answered on its thread: let the timer republish, so an
        answer that came after it stopped waiting shows at once."""
        if self._on_change is not None:
            self._on_change()

    def run_io(self, wait: float | None = None) -> Snapshot:
        """Start every I/O check not still running, wait for them at most
        ``wait`` seconds (None: up to each one's deadline), measure each
        worker; the timer's job. Never blocks longer than ``wait``."""
        begun = time.monotonic()
        started = [r for r in self._runners.values() if r.start()]
        for runner in started:
            limit = self.deadline(runner.check) if wait is None else wait
            runner.wait(max(0.0, begun + limit - time.monotonic()))
        self.measure_workers()
        now = self.state.now()
        results = {name: (o.result if o is not None else NOT_CHECKED)
                   for name, o in self._outcomes(now).items()}
        snap = Snapshot(taken_at=now, wall=self._wall(), results=results)
        self._snapshot = snap
        return snap

    def _outcomes(self, now: float) -> dict[str, Outcome | None]:
        return {name: r.outcome(now) for name, r in self._runners.items()}

    def close(self) -> None:
        """The checks' threads end after their current run."""
        for runner in self._runners.values():
            runner.close()

    def measure_workers(self) -> None:
        """Publish each live worker's USS; the master enforces the limit."""
        for status in self.state.components():
            if status.alive and status.pid > 0:
                figure = self._uss(status.pid)
                if figure is not None:
                    self.state.set_memory(status.component, figure)

    def tick(self, wait: float | None = None) -> Report:
        """One timer cycle: run the I/O checks (waiting at most ``wait``
        seconds for them), then publish the verdict."""
        self.run_io(wait)
        return self.publish()

    def publish(self) -> Report:
        report = self.evaluate(notify=False)
        self.last = report
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
        outcomes = self._outcomes(now)
        views = []
        for check in self.checks:
            if check.sort is Sort.IO:
                got = outcomes.get(check.name)
                if got is not None:
                    result, at, seen = got.result, got.wall, got.seen
                else:
                    result, at, seen = NOT_CHECKED, wall, now
                known = check.meanwhile() if result.ok else None
                if known is not None:
                    result, at, seen = known, wall, now
            else:
                result, at, seen = run_check(check, now), wall, now
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
