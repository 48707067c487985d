"""The Prometheus counters kept in shared memory, one block.

Each family has one writing process, named below; the counters outlive a
worker's restart because they live in the master's shared memory, not in the
worker. :class:`Counters` is the part of
:class:`~kuryr_supervisor.state.shared.SharedState` that reads and writes them.
"""
from __future__ import annotations

import threading
from typing import Any

from kuryr_supervisor.state.components import SLOTS, Component, Reason

# -- metrics layout (one block; the writer of each family is named) ----------
#: CNI commands counted by the Server; "unknown" is a request that never
#: parsed far enough to name one.
CNI_COMMANDS = ("ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION", "unknown")
#: Result codes kept apart: 0 (success), the spec's and kuryr-supervisor's
#: codes; -1 collects any other.
CNI_CODES = (0, 1, 2, 3, 4, 5, 6, 7, 11, 50, 100, 101, 102, 103, 104, -1)
#: Commands whose latency is kept, and the histogram's upper bounds (s).
TIMED_COMMANDS = ("ADD", "DEL")
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0, float("inf"))
#: Kinds of pod-watch errors counted by the Watcher.
WATCH_ERRORS = ("gone", "temporary", "permanent", "other")
#: Why the master restarted a worker.
RESTART_CAUSES = (Reason.EXITED, Reason.KILLED, Reason.STALE, Reason.MEMORY)
_M_REQUESTS = 0
_M_LATENCY = _M_REQUESTS + len(CNI_COMMANDS) * len(CNI_CODES)
_LAT_WIDTH = len(LATENCY_BUCKETS) + 2          # buckets, sum, count
M_IPAM_SIZE = _M_LATENCY + len(TIMED_COMMANDS) * _LAT_WIDTH
_M_IPAM_USED = M_IPAM_SIZE + 1
_M_RELISTS = _M_IPAM_USED + 1
_M_WATCH_ERRORS = _M_RELISTS + 1
_M_RESTARTS = _M_WATCH_ERRORS + len(WATCH_ERRORS)
METRICS_SIZE = _M_RESTARTS + SLOTS * len(RESTART_CAUSES)


class Counters:
    """Named access to the counter block (mixed into SharedState)."""

    active: tuple[Component, ...]
    _metrics: Any
    _local: threading.Lock

    def record_cni_request(self, command: str, code: int,
                           seconds: float | None = None) -> None:
        """One CNI request answered (written by the Server): its command,
        result code (0: success) and, for ADD and DEL, its duration."""
        cmd = CNI_COMMANDS.index(command) if command in CNI_COMMANDS \
            else len(CNI_COMMANDS) - 1
        col = CNI_CODES.index(code) if code in CNI_CODES else len(CNI_CODES) - 1
        with self._local:
            self._metrics[_M_REQUESTS + cmd * len(CNI_CODES) + col] += 1
            if seconds is not None and command in TIMED_COMMANDS:
                base = _M_LATENCY + TIMED_COMMANDS.index(command) * _LAT_WIDTH
                bucket = next(i for i, bound in enumerate(LATENCY_BUCKETS)
                              if seconds <= bound)
                self._metrics[base + bucket] += 1
                self._metrics[base + len(LATENCY_BUCKETS)] += seconds
                self._metrics[base + len(LATENCY_BUCKETS) + 1] += 1

    def cni_requests(self) -> dict[tuple[str, int], int]:
        """Requests answered so far by (command, code), zeros left out."""
        out = {}
        for i, command in enumerate(CNI_COMMANDS):
            for j, code in enumerate(CNI_CODES):
                n = int(self._metrics[_M_REQUESTS + i * len(CNI_CODES) + j])
                if n:
                    out[command, code] = n
        return out

    def cni_latency(self, command: str) -> tuple[list[int], float, int]:
        """(per-bucket counts, not cumulative; sum of seconds; count)."""
        base = _M_LATENCY + TIMED_COMMANDS.index(command) * _LAT_WIDTH
        raw = self._metrics[base:base + _LAT_WIDTH]
        return ([int(x) for x in raw[:len(LATENCY_BUCKETS)]],
                raw[len(LATENCY_BUCKETS)], int(raw[len(LATENCY_BUCKETS) + 1]))

    def set_ipam_pool(self, size: int | None, used: int) -> None:
        """Addresses in the pool (None: unknown yet) and allocated ones
        (written by the HealthManager from its timer)."""
        self._metrics[M_IPAM_SIZE] = -1 if size is None else size
        self._metrics[_M_IPAM_USED] = used

    def ipam_pool(self) -> tuple[int | None, int]:
        size = int(self._metrics[M_IPAM_SIZE])
        return (None if size < 0 else size), int(self._metrics[_M_IPAM_USED])

    def record_watch_relist(self) -> None:
        """One complete list of this node's pods (written by the Watcher)."""
        self._metrics[_M_RELISTS] += 1

    def record_watch_error(self, kind: str) -> None:
        """One failed list or watch, by kind (written by the Watcher)."""
        i = WATCH_ERRORS.index(kind) if kind in WATCH_ERRORS \
            else len(WATCH_ERRORS) - 1
        self._metrics[_M_WATCH_ERRORS + i] += 1

    def watch_counts(self) -> tuple[int, dict[str, int]]:
        """(relists, errors by kind)."""
        return int(self._metrics[_M_RELISTS]), {
            kind: int(self._metrics[_M_WATCH_ERRORS + i])
            for i, kind in enumerate(WATCH_ERRORS)}

    def record_restart_cause(self, comp: Component, reason: Reason) -> None:
        """Why the master restarted ``comp`` (written by the master)."""
        cause = reason if reason in RESTART_CAUSES else Reason.EXITED
        i = comp.slot * len(RESTART_CAUSES) + RESTART_CAUSES.index(cause)
        with self._local:
            self._metrics[_M_RESTARTS + i] += 1

    def restarts_by_cause(self) -> dict[tuple[Component, Reason], int]:
        """Restarts of this role's workers, by cause."""
        return {(comp, cause): int(self._metrics[
                    _M_RESTARTS + comp.slot * len(RESTART_CAUSES) + j])
                for comp in self.active
                for j, cause in enumerate(RESTART_CAUSES)}
