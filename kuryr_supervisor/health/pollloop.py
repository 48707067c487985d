"""A step run every few tenths of a second on a thread of its own, beside
a worker's loop (the HealthManager's Node events, STATUS flags, the node's
NodeNetwork record).

Why a thread: each of these reads shared memory or writes to the API,
and neither the probes nor the HealthManager's heartbeat may wait for it.
A step that raises is logged once per run of failures and never ends the
loop; :meth:`PollLoop.stop` ends it within a second.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable

LOG = logging.getLogger(__name__)


class PollLoop:
    """``step`` every ``interval`` seconds until :meth:`stop`."""

    def __init__(self, step: Callable[[], object], *, interval: float,
                 name: str) -> None:
        self._step, self._interval, self.name = step, interval, name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name,
                                        daemon=True)

    def start(self) -> PollLoop:
        self._thread.start()
        return self

    def _run(self) -> None:
        failing = False
        while not self._stop.wait(self._interval):
            try:
                self._step()
                failing = False
            except Exception:  # noqa: BLE001 - never ends the worker's thread
                if not failing:
                    LOG.exception("%s failed", self.name)
                failing = True

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(1.0)
