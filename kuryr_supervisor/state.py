"""Health state shared by the master and its workers.

Every primitive is created once, by :meth:`SharedState.create`, from the one
``fork`` multiprocessing context the master uses; workers inherit it across
``fork`` and use it only through the named methods below.

Invariant: every field has exactly one writing process (a worker writes its own
slot, each handler process its own failure count included, and the globals it
owns; the master writes death, restart and budget
fields; the HealthManager writes the overall verdict and memory figures).
Fields are aligned 8-byte doubles in a raw shared array, so a single store is
atomic and no cross-process lock exists that a SIGKILLed holder could leave
taken. Read-modify-write within one process is guarded by a thread lock.
"""
from __future__ import annotations

import dataclasses
import enum
import multiprocessing.context
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

Clock = Callable[[], float]


class WorkerKind(enum.Enum):
    """What a worker process does; deadlines and policies go by kind."""

    WATCHER = "watcher"
    SERVER = "server"
    HEALTH = "health"
    HANDLER = "handler"      # the controller role: one process per handler


@dataclasses.dataclass(frozen=True)
class Component:
    """One worker process: its slot in shared memory, its kind, its name.

    The CNI role's workers and the HealthManager have a fixed slot each
    (``Component.WATCHER``, ``.SERVER``, ``.HEALTH``). The controller role
    runs one process per configured handler, each in one of
    :data:`MAX_HANDLERS` slots reserved in every daemon (shared memory is
    sized once, before forking, whatever the role), named
    ``handler:<entry point name>`` in probes, metrics and ``/status``.
    """

    slot: int
    kind: WorkerKind
    handler: str = ""        # the handler's entry point name (HANDLER only)

    WATCHER: ClassVar[Component]
    SERVER: ClassVar[Component]
    HEALTH: ClassVar[Component]

    @property
    def label(self) -> str:
        return f"{self.kind.value}:{self.handler}" if self.handler \
            else self.kind.value


Component.WATCHER = Component(0, WorkerKind.WATCHER)
Component.SERVER = Component(1, WorkerKind.SERVER)
Component.HEALTH = Component(2, WorkerKind.HEALTH)

#: Handler processes the controller role can run (``[controller] handlers``
#: is refused with exit 78 beyond it): their slots are reserved up front.
MAX_HANDLERS = 8
_FIRST_HANDLER_SLOT = 3
_SLOTS = _FIRST_HANDLER_SLOT + MAX_HANDLERS

#: The workers of the CNI role (``--role cni``); a role's slots are the only
#: ones probes, metrics and the supervisor look at.
CNI_COMPONENTS = (Component.WATCHER, Component.SERVER, Component.HEALTH)


def controller_components(handlers: Sequence[str]) -> tuple[Component, ...]:
    """The controller role's workers: one per handler, then the HealthManager."""
    if len(handlers) > MAX_HANDLERS:
        raise ValueError(f"{len(handlers)} handlers, at most {MAX_HANDLERS}")
    return (*(Component(_FIRST_HANDLER_SLOT + i, WorkerKind.HANDLER, name)
              for i, name in enumerate(handlers)), Component.HEALTH)


class Reason(enum.IntEnum):
    """Why a component is in its current state (the slot's reason code)."""

    OK = 0
    NOT_STARTED = 1
    EXITED = 2       # exited on its own, see exit_code
    KILLED = 3       # killed by a signal, see exit_code (negative signal number)
    STALE = 4        # stopped heartbeating and was killed by the supervisor
    MEMORY = 5       # restarted for passing max_worker_memory
    STOPPING = 6     # terminating as part of a shutdown


class LiveCause(enum.IntEnum):
    """The first failing liveness cause, published by the HealthManager.

    The master reads it to apply ``worker_death_policy = exit``; each cause has
    its own documented exit status (see :mod:`kuryr_supervisor.exitcodes`).
    """

    NONE = 0
    RESTART_BUDGET = 1
    CNI_FAILURES = 2
    MEMORY = 3
    NETLINK = 4
    CHECKER_STALE = 5
    COMPONENT = 6    # a worker dead or stale: the supervisor restarts it
    HANDLER_FAILURES = 7   # controller: consecutive handler failures


class Fault(enum.IntFlag):
    """Persistent environment faults the Server found (a bit set each).

    Restarting cannot fix them, so they fail readiness naming the cause and
    never count against the CNI ADD failure budget.
    """

    NONE = 0
    SOCKET = 1          # the CNI socket file was deleted or replaced
    IPAM_STORE = 2      # the allocation store is corrupt or unreadable
    BRIDGE_KIND = 4     # the configured bridge name is another kind of link
    NET_ADMIN = 8       # netlink refused for lack of CAP_NET_ADMIN
    DISK_FULL = 16      # the state directory's file system is full or read-only


# Per-component slot layout.
_ALIVE, _READY, _HEARTBEAT, _PID, _RESTARTS, _REASON, _STARTED, _EXIT_CODE, \
    _MEMORY, _FAILURES, _SLOT_SIZE = range(11)
# Global layout.
_CNI_FAILURES, _DRAINING, _EVER_READY, _BUDGET_EXCEEDED, _LIVE, _OVERALL_READY, \
    _LIVE_CAUSE, _CHECKED_AT, _INFLIGHT, _CAPACITY, _FAULTS, \
    _GLOBAL_SIZE = range(12)
_SUMMARY_BYTES = 256

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
_M_IPAM_SIZE = _M_LATENCY + len(TIMED_COMMANDS) * _LAT_WIDTH
_M_IPAM_USED = _M_IPAM_SIZE + 1
_M_RELISTS = _M_IPAM_USED + 1
_M_WATCH_ERRORS = _M_RELISTS + 1
_M_RESTARTS = _M_WATCH_ERRORS + len(WATCH_ERRORS)
_METRICS_SIZE = _M_RESTARTS + _SLOTS * len(RESTART_CAUSES)


@dataclasses.dataclass(frozen=True)
class ComponentStatus:
    """A consistent-enough copy of one component's slot."""

    component: Component
    alive: bool
    ready: bool
    heartbeat: float      # monotonic time of the last heartbeat (0: never)
    pid: int
    restarts: int
    reason: Reason
    started: float        # monotonic time the current process registered
    exit_code: int        # last exit status (negative: killed by that signal)
    memory: int           # USS in bytes, as last measured by the HealthManager

    def heartbeat_age(self, now: float) -> float:
        return now - self.heartbeat if self.heartbeat else float("inf")


@dataclasses.dataclass(frozen=True)
class Overall:
    """The HealthManager's last verdict, as published for the master."""

    live: bool
    ready: bool
    cause: LiveCause
    checked_at: float     # monotonic; 0 when no verdict yet
    summary: str


class SharedState:
    """Named access to the shared health flags (see the module invariant)."""

    def __init__(self, slots: Any, globals_: Any, summary: Any,
                 metrics: Any = None, *,
                 clock: Clock = time.monotonic,
                 active: tuple[Component, ...] = CNI_COMPONENTS) -> None:
        self.active = active
        self._slots = slots
        self._globals = globals_
        self._summary = summary
        self._metrics = [0.0] * _METRICS_SIZE if metrics is None else metrics
        self._clock = clock
        self._local = threading.Lock()

    @classmethod
    def create(cls, ctx: multiprocessing.context.BaseContext, *,
               clock: Clock = time.monotonic,
               active: tuple[Component, ...] = CNI_COMPONENTS) -> SharedState:
        """Allocate the shared memory; call once, in the master, before forking.

        ``active`` is the role's set of workers (the other slots stay unused).
        """
        slots = ctx.RawArray("d", _SLOTS * _SLOT_SIZE)
        globals_ = ctx.RawArray("d", _GLOBAL_SIZE)
        summary = ctx.RawArray("c", _SUMMARY_BYTES)
        for slot in range(_SLOTS):
            slots[slot * _SLOT_SIZE + _REASON] = Reason.NOT_STARTED
        globals_[_LIVE] = 1.0
        metrics = ctx.RawArray("d", _METRICS_SIZE)
        metrics[_M_IPAM_SIZE] = -1.0
        return cls(slots, globals_, summary, metrics, clock=clock,
                   active=active)

    def now(self) -> float:
        return self._clock()

    # -- per component ------------------------------------------------------
    def _set(self, comp: Component, field: int, value: float) -> None:
        self._slots[comp.slot * _SLOT_SIZE + field] = value

    def _get(self, comp: Component, field: int) -> float:
        return self._slots[comp.slot * _SLOT_SIZE + field]

    def register(self, comp: Component, pid: int) -> None:
        """A freshly started worker claims its slot (written by the worker)."""
        now = self._clock()
        self._set(comp, _PID, pid)
        self._set(comp, _STARTED, now)
        self._set(comp, _HEARTBEAT, now)
        self._set(comp, _READY, 0)
        self._set(comp, _REASON, Reason.OK)
        self._set(comp, _ALIVE, 1)

    def heartbeat(self, comp: Component) -> None:
        self._set(comp, _HEARTBEAT, self._clock())

    def set_ready(self, comp: Component, ready: bool) -> None:
        self._set(comp, _READY, 1 if ready else 0)

    def mark_down(self, comp: Component, reason: Reason, exit_code: int = 0) -> None:
        """The master records that a worker is gone or being replaced."""
        self._set(comp, _ALIVE, 0)
        self._set(comp, _READY, 0)
        self._set(comp, _REASON, reason)
        self._set(comp, _EXIT_CODE, exit_code)

    def count_restart(self, comp: Component) -> int:
        """The master counts one restart of ``comp``; returns the total."""
        with self._local:
            total = int(self._get(comp, _RESTARTS)) + 1
            self._set(comp, _RESTARTS, total)
        return total

    def set_memory(self, comp: Component, uss_bytes: int) -> None:
        self._set(comp, _MEMORY, uss_bytes)

    def component(self, comp: Component) -> ComponentStatus:
        base = comp.slot * _SLOT_SIZE
        raw = self._slots[base:base + _SLOT_SIZE]
        return ComponentStatus(
            component=comp, alive=bool(raw[_ALIVE]), ready=bool(raw[_READY]),
            heartbeat=raw[_HEARTBEAT], pid=int(raw[_PID]),
            restarts=int(raw[_RESTARTS]), reason=Reason(int(raw[_REASON])),
            started=raw[_STARTED], exit_code=int(raw[_EXIT_CODE]),
            memory=int(raw[_MEMORY]))

    def components(self) -> list[ComponentStatus]:
        return [self.component(c) for c in self.active]

    def of_kind(self, kind: WorkerKind) -> tuple[Component, ...]:
        """The role's workers of one kind, in slot order."""
        return tuple(c for c in self.active if c.kind is kind)

    # -- CNI failure budget (written by the Server) ------------------------
    def record_cni_failure(self) -> int:
        """Count one internal CNI ADD failure; returns the consecutive count."""
        with self._local:
            count = int(self._globals[_CNI_FAILURES]) + 1
            self._globals[_CNI_FAILURES] = count
        return count

    def record_cni_success(self) -> None:
        """A successful ADD resets the consecutive failure count."""
        self._globals[_CNI_FAILURES] = 0

    def cni_failures(self) -> int:
        return int(self._globals[_CNI_FAILURES])

    # -- handler failure budget (each handler process writes its own) -----
    def record_handler_failure(self, comp: Component) -> int:
        """Count one failed step of ``comp``; returns its consecutive count."""
        with self._local:
            count = int(self._get(comp, _FAILURES)) + 1
            self._set(comp, _FAILURES, count)
        return count

    def record_handler_success(self, comp: Component) -> None:
        self._set(comp, _FAILURES, 0)

    def handler_failures(self) -> dict[Component, int]:
        """Each handler's consecutive failed steps."""
        return {c: int(self._get(c, _FAILURES))
                for c in self.of_kind(WorkerKind.HANDLER)}

    def set_server_load(self, inflight: int, capacity: int) -> None:
        self._globals[_INFLIGHT] = inflight
        self._globals[_CAPACITY] = capacity

    def server_load(self) -> tuple[int, int]:
        return int(self._globals[_INFLIGHT]), int(self._globals[_CAPACITY])

    def set_fault(self, fault: Fault, present: bool) -> bool:
        """Raise or clear one environment fault (written by the Server's
        threads); True when that changed anything."""
        with self._local:
            before = Fault(int(self._globals[_FAULTS]))
            after = before | fault if present else before & ~fault
            self._globals[_FAULTS] = int(after)
        return after != before

    def faults(self) -> Fault:
        return Fault(int(self._globals[_FAULTS]))

    # -- lifecycle (written by the master) ----------------------------------
    def set_draining(self) -> None:
        self._globals[_DRAINING] = 1

    def draining(self) -> bool:
        return bool(self._globals[_DRAINING])

    def set_restart_budget_exceeded(self, exceeded: bool) -> None:
        self._globals[_BUDGET_EXCEEDED] = 1 if exceeded else 0

    def restart_budget_exceeded(self) -> bool:
        return bool(self._globals[_BUDGET_EXCEEDED])

    # -- overall verdict (written by the HealthManager) ---------------------
    def publish_overall(self, *, live: bool, ready: bool, cause: LiveCause,
                        summary: str) -> None:
        data = summary.encode("utf-8", "replace")[:_SUMMARY_BYTES - 1]
        self._summary[:len(data) + 1] = data + b"\0"
        self._globals[_LIVE] = 1 if live else 0
        self._globals[_OVERALL_READY] = 1 if ready else 0
        self._globals[_LIVE_CAUSE] = cause
        if ready:
            self._globals[_EVER_READY] = 1
        self._globals[_CHECKED_AT] = self._clock()

    def ever_ready(self) -> bool:
        """True once the daemon has been ready at least once (``/startup``)."""
        return bool(self._globals[_EVER_READY])

    def overall(self) -> Overall:
        raw = bytes(self._summary[:])
        return Overall(
            live=bool(self._globals[_LIVE]),
            ready=bool(self._globals[_OVERALL_READY]),
            cause=LiveCause(int(self._globals[_LIVE_CAUSE])),
            checked_at=self._globals[_CHECKED_AT],
            summary=raw.split(b"\0", 1)[0].decode("utf-8", "replace"))

    # -- metrics (counters survive worker restarts; one writer per family) --
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
        self._metrics[_M_IPAM_SIZE] = -1 if size is None else size
        self._metrics[_M_IPAM_USED] = used

    def ipam_pool(self) -> tuple[int | None, int]:
        size = int(self._metrics[_M_IPAM_SIZE])
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
