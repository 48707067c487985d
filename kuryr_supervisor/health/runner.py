"""I/O checks off the HealthManager's loop, each under its own deadline.

The loop that runs the checks also beats the HealthManager's heartbeat, so
a check that waits on a dependency (ovsdb-server stopped, a Kubernetes API
or a Keystone that accepts and never answers) must not hold it: the master
would then kill the HealthManager as stale, again and again, for a fault a
restart cannot fix, and ``/ready`` would name nothing while it is down.

:class:`CheckRunner` runs one check on a thread of its own and the loop
only starts runs and reads outcomes. :class:`Offloaded` does the same for
any other call the loop makes to a dependency (the Node condition's patch).

Invariants:

- one thread per check, made at the first run and kept: a run still going
  is never started again, so a hung dependency costs one thread, not one
  per cycle;
- a run that has gone on longer than the check's deadline is the check
  failing, named (``"ovsdb: no answer within 5 s"``); the answer it gives
  if it ever returns is the next result;
- reading an outcome never blocks on the check (a lock held only around
  assignments): it is safe on the probe path;
- a check that raises fails alone, with the exception's text.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kuryr_supervisor.health.checks.base import Check, Result

LOG = logging.getLogger(__name__)

Clock = Callable[[], float]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One result with when it was had: ``wall`` (epoch seconds, shown)
    and ``seen`` (the monitor's monotonic clock, orders results)."""

    result: Result
    wall: float
    seen: float


def run_check(check: Check, now: float) -> Result:
    """Run one check; an exception is that check failing, never the
    caller's."""
    try:
        return check.run(now)
    except Exception as exc:  # reported as the check's failure
        LOG.debug("health check %s raised", check.name, exc_info=True)
        return Result.failed(f"check raised {type(exc).__name__}: {exc}")


def overrun(name: str, seconds: float) -> Result:
    """What a check that has not answered within its deadline says."""
    return Result.failed(f"{name}: no answer within {seconds:g} s")


class CheckRunner:
    """Runs ``check`` on its own thread when :meth:`start` asks, at most
    one run at a time; ``deadline()`` is re-read at every look (SIGHUP).

    ``clock`` is the monitor's monotonic clock (it dates runs and judges
    overruns); waits are bounded in real seconds. ``on_done`` is called
    from the check's thread after each run (e.g. to republish a result
    that came after the loop stopped waiting)."""

    def __init__(self, check: Check, deadline: Callable[[], float], *,
                 clock: Clock, wall: Clock = time.time,
                 on_done: Callable[[], None] | None = None) -> None:
        self.check = check
        self._deadline = deadline
        self._clock, self._wall = clock, wall
        self._on_done = on_done
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._requested = False
        self._started: float | None = None   # monotonic, of the run going
        self._last: Outcome | None = None
        self._closed = False

    @property
    def name(self) -> str:
        return self.check.name

    def start(self) -> bool:
        """Ask for a run; False when one is still going (not doubled)."""
        with self._cond:
            if self._closed or self._started is not None:
                return False
            # Dated when asked, not when the thread wakes: the deadline
            # counts from the cycle that wanted the answer.
            self._started = self._clock()
            self._requested = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name=f"check-{self.check.name}",
                    daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return True

    def busy(self) -> bool:
        with self._cond:
            return self._started is not None

    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` (real time) for the run asked for to
        end; whether it did."""
        end = time.monotonic() + seconds
        with self._cond:
            while self._started is not None:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def outcome(self, now: float) -> Outcome | None:
        """The last result, or the overrun of the run going on since more
        than its deadline before ``now``; None before any result."""
        with self._cond:
            started, last = self._started, self._last
        if started is not None:
            seconds = float(self._deadline())
            if now - started > seconds:
                return Outcome(overrun(self.check.name, seconds),
                               self._wall(), now)
        return last

    def close(self) -> None:
        """The thread ends after its current run (never waited for)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._requested and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                self._requested = False
                started = self._started
            assert started is not None
            result = run_check(self.check, started)
            done = Outcome(result, self._wall(), self._clock())
            with self._cond:
                self._started = None
                self._last = done
                self._cond.notify_all()
            if self._on_done is not None:
                self._on_done()


class Offloaded:
    """Calls ``fn`` with the latest arguments handed to :meth:`submit`, on
    one thread of its own: a caller never waits for ``fn``; arguments
    submitted while a call is going replace each other (only the last is
    used)."""

    def __init__(self, fn: Callable[..., Any], name: str) -> None:
        self._fn = fn
        self._name = name
        self._cond = threading.Condition()
        self._pending: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, *args: Any, **kwargs: Any) -> None:
        with self._cond:
            if self._closed:
                return
            self._pending = (args, kwargs)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop,
                                                name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                args, kwargs = self._pending  # type: ignore[misc]
                self._pending = None
            try:
                self._fn(*args, **kwargs)
            except Exception:  # noqa: BLE001 - logged, the thread goes on
                LOG.exception("%s failed", self._name)
