"""Tells the outside world what the HealthManager concluded: systemd (READY,
WATCHDOG, STATUS, STOPPING), the log (once per transition) and the
ready hooks (installing the shim and conflist, so the kubelet keeps the
node NotReady until the daemon can serve).

Runs in the master, fed from shared memory by the governor thread.

Start-up is bounded by liveness, not readiness: systemd's watchdog is off
while a unit is activating, and READY=1 waits for the first ready verdict
(the Kubernetes API may be down at boot). So while the daemon is alive but
not yet ready it sends ``EXTEND_TIMEOUT_USEC`` every few seconds: an API
outage keeps the unit "activating" instead of looping on start timeouts,
and a daemon that is not alive stops extending and hits ``TimeoutStartSec``.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from kuryr_supervisor.master.sdnotify import Notifier
from kuryr_supervisor.state import Overall

LOG = logging.getLogger(__name__)

START_EXTEND_EVERY = 10.0          # seconds between start-timeout extensions
START_EXTEND_USEC = 30_000_000     # each extension: well over the period


class Reporter:
    def __init__(self, notifier: Notifier, *,
                 ready_hooks: Sequence[Callable[[bool], object]] = ()) -> None:
        """``ready_hooks`` get every fresh readiness verdict (the installer
        acts on the first ready one and retries after a failure)."""
        self._notifier = notifier
        self._ready_hooks = list(ready_hooks)
        self._ready_sent = False
        self._status = ""
        self._live: bool | None = None
        self._last_ping = float("-inf")
        self._last_extend = float("-inf")

    @property
    def ready_sent(self) -> bool:
        return self._ready_sent

    def update(self, overall: Overall, *, ever_ready: bool, now: float,
               checker_deadline: float) -> None:
        fresh = bool(overall.checked_at) and \
            now - overall.checked_at <= checker_deadline
        live = overall.live and fresh
        summary = overall.summary if fresh else \
            "not live: no recent verdict from the HealthManager"
        self._run_hooks(overall.ready and fresh)
        if ever_ready and not self._ready_sent:
            self._status = summary
            self._first_ready()
        elif summary != self._status and self._ready_sent:
            self._notifier.notify(f"STATUS={summary}")
        self._status = summary
        if self._live is not None and live != self._live:
            if live:
                LOG.info("liveness restored (%s)", summary)
            else:
                LOG.warning("liveness lost (%s)", summary)
        self._live = live
        interval = self._notifier.watchdog_interval
        if interval and live and now - self._last_ping >= interval:
            self._notifier.notify("WATCHDOG=1")
            self._last_ping = now
        if live and not self._ready_sent and \
                now - self._last_extend >= START_EXTEND_EVERY:
            self._notifier.notify(f"EXTEND_TIMEOUT_USEC={START_EXTEND_USEC}",
                                  f"STATUS=starting: {summary}")
            self._last_extend = now

    def _run_hooks(self, ready: bool) -> None:
        for hook in self._ready_hooks:
            try:
                hook(ready)
            except Exception:  # noqa: BLE001 - a hook must not stop the master
                LOG.exception("ready hook %r failed", hook)

    def _first_ready(self) -> None:
        self._ready_sent = True
        LOG.info("daemon is ready")
        self._notifier.notify("READY=1", f"STATUS={self._status}")

    def stopping(self) -> None:
        self._notifier.notify("STOPPING=1", "STATUS=stopping: draining")
