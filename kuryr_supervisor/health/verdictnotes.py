"""The daemon's verdict as Node Events: Ready/NotReady and Live/NotLive.

Why apart from the worker and budget Events (:mod:`.nodeevents`): these
follow the overall verdict, with hysteresis. A daemon not ready for less
than :data:`READY_HOLD` -- a worker being restarted within the restart
budget, a slow answer of the API -- is not news: the WorkerRestarted Event
says what happened, and a NotReady/Ready pair per healed kill would bury
it (120 kills in a minute wrote 25 of each). NotReady is told once it
lasted that long, Ready the first time the daemon is ready and after a
NotReady was told. Liveness no longer fails for what the supervisor heals
(:class:`~kuryr_supervisor.health.checks.components.ComponentAliveCheck`),
so NotLive is told at once: it means the node needs someone.
"""
from __future__ import annotations

from collections.abc import Callable

from kuryr_supervisor.kubernetes.events import Note
from kuryr_supervisor.state import Overall

#: Not ready for less than this is not an Event (seconds).
READY_HOLD = 10.0
WARNING, NORMAL = "Warning", "Normal"


class VerdictNotes:
    """Turns successive verdicts into Notes (one :meth:`update` per look)."""

    def __init__(self, emit: Callable[[Note], object]) -> None:
        self._emit = emit
        self._ready: bool | None = None     # None: no verdict seen yet
        self._unready: tuple[float, str] | None = None
        self._live = True
        self._bad_since: dict[str, tuple[float, str]] = {}

    def update(self, overall: Overall, *, ever_ready: bool,
               now: float) -> None:
        if not overall.checked_at:
            return
        self._readiness(overall.ready, overall.summary, ever_ready, now)
        if overall.live != self._live:
            cause = overall.cause.name.lower()
            self._change("Live", "NotLive", overall.live,
                         f"{overall.summary} (cause: {cause})", now)
            self._live = overall.live

    def _readiness(self, ready: bool, summary: str, ever_ready: bool,
                   now: float) -> None:
        if ready:
            self._unready = None
            if self._ready is not True:
                self._change("Ready", "NotReady", True, summary, now)
            self._ready = True
            return
        if self._ready is not True:
            self._ready = False           # starting, or already told
            return
        if self._unready is None:
            self._unready = (now, summary)
        if now - self._unready[0] >= READY_HOLD and ever_ready:
            self._change("Ready", "NotReady", False, summary, now,
                         since=self._unready[0])
            self._ready = False

    def _change(self, good: str, bad: str, ok: bool, summary: str,
                now: float, *, since: float | None = None) -> None:
        if not ok:
            self._bad_since[good] = (now if since is None else since, summary)
            self._emit(Note(WARNING, bad, summary))
            return
        was = self._bad_since.pop(good, None)
        text = "kuryr-supervisor is ready" if good == "Ready" else \
            "kuryr-supervisor is live"
        if was is not None:
            text += f" again after {now - was[0]:.1f}s (was: {was[1]})"
        self._emit(Note(NORMAL, good, text))
