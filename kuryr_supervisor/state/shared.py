"""SharedState: the one object through which every process reads and writes
the shared memory (see the package's invariant)."""
from __future__ import annotations

import enum
import multiprocessing.context
import threading
import time
from collections.abc import Callable
from typing import Any

from kuryr_supervisor.state.cnistatus import StatusBoard
from kuryr_supervisor.state.components import (
    CNI_COMPONENTS,
    SLOTS,
    Component,
    ComponentStatus,
    Reason,
    WorkerKind,
)
from kuryr_supervisor.state.counters import M_IPAM_SIZE, METRICS_SIZE, Counters
from kuryr_supervisor.state.creates import CreatesBoard
from kuryr_supervisor.state.lbstats import LoadBalancerBoard
from kuryr_supervisor.state.lostports import LostPortBoard
from kuryr_supervisor.state.netverdicts import VerdictBoard
from kuryr_supervisor.state.policystats import PolicyBoard
from kuryr_supervisor.state.poolstats import PoolBoard
from kuryr_supervisor.state.verdict import Fault, LiveCause, Mode, Overall

Clock = Callable[[], float]

# Per-component slot layout.
_ALIVE, _READY, _HEARTBEAT, _PID, _RESTARTS, _REASON, _STARTED, _EXIT_CODE, \
    _MEMORY, _FAILURES, _SLOT_SIZE = range(11)
# Global layout.
_CNI_FAILURES, _DRAINING, _EVER_READY, _BUDGET_EXCEEDED, _LIVE, _OVERALL_READY, \
    _LIVE_CAUSE, _CHECKED_AT, _INFLIGHT, _CAPACITY, _FAULTS, _MODES, \
    _GLOBAL_SIZE = range(13)
_SUMMARY_BYTES = 256


class Section(enum.Enum):
    """A board of one role's workers: allocated in shared memory only for
    the role that declares it (:class:`SharedState`'s ``sections``)."""

    POOLS = "pools"
    CREATES = "creates"
    CNI_STATUS = "cni_status"
    VERDICTS = "verdicts"
    LOST_PORTS = "lost_ports"
    LOAD_BALANCERS = "load_balancers"
    POLICIES = "policies"


#: Every section (a state made without a role, as tests make it).
ALL_SECTIONS = frozenset(Section)


class SharedState(Counters):
    """Named access to the shared health flags (see the module invariant)."""

    def __init__(self, slots: Any, globals_: Any, summary: Any,
                 metrics: Any = None, *,
                 clock: Clock = time.monotonic,
                 active: tuple[Component, ...] = CNI_COMPONENTS,
                 pools: PoolBoard | None = None,
                 creates: CreatesBoard | None = None,
                 cni_status: StatusBoard | None = None,
                 verdicts: VerdictBoard | None = None,
                 lost_ports: LostPortBoard | None = None,
                 load_balancers: LoadBalancerBoard | None = None,
                 policies: PolicyBoard | None = None) -> None:
        self.active = active
        #: The role's boards (:meth:`create`'s ``sections``; all of them
        #: for a state made without a role).
        self.sections = ALL_SECTIONS
        #: Port pools' figures (written by the neutron_port handler).
        self.pools = pools or PoolBoard()
        #: Its port creates at Neutron, for the process restarted in its
        #: place (written by the neutron_port handler).
        self.creates = creates or CreatesBoard()
        #: What CNI STATUS answers, from the checks (written by the
        #: HealthManager; read by the Server).
        self.cni_status = cni_status or StatusBoard()
        #: The network judge's verdicts (written by the network_health
        #: handler; read by /metrics).
        self.verdicts = verdicts or VerdictBoard()
        #: This node's pods whose port is lost (written by the Watcher's
        #: PodPort follower; read by the HealthManager).
        self.lost_ports = lost_ports or LostPortBoard()
        #: The services handler's load balancers and writes (written by
        #: the services handler; read by /metrics).
        self.load_balancers = load_balancers or LoadBalancerBoard()
        #: The network_policy handler's policies, writes and Neutron's
        #: state (written by that handler; read by /metrics, readiness).
        self.policies = policies or PolicyBoard()
        self._slots = slots
        self._globals = globals_
        self._summary = summary
        self._metrics = [0.0] * METRICS_SIZE if metrics is None else metrics
        self._clock = clock
        self._local = threading.Lock()

    @classmethod
    def create(cls, ctx: multiprocessing.context.BaseContext, *,
               clock: Clock = time.monotonic,
               active: tuple[Component, ...] = CNI_COMPONENTS,
               sections: frozenset[Section] = ALL_SECTIONS) -> SharedState:
        """Allocate the shared memory; call once, in the master, before forking.

        ``active`` is the role's set of workers (the other slots stay unused);
        ``sections`` the role's boards: each is allocated here, shared with
        every worker. A board the role does not declare is the process's
        own, empty one (what a reader of the other role, /metrics, /status,
        reads), never None: no reader probes whether it exists, and no
        shared memory is spent on it.
        """
        slots = ctx.RawArray("d", SLOTS * _SLOT_SIZE)
        globals_ = ctx.RawArray("d", _GLOBAL_SIZE)
        summary = ctx.RawArray("c", _SUMMARY_BYTES)
        for slot in range(SLOTS):
            slots[slot * _SLOT_SIZE + _REASON] = Reason.NOT_STARTED
        globals_[_LIVE] = 1.0
        metrics = ctx.RawArray("d", METRICS_SIZE)
        metrics[M_IPAM_SIZE] = -1.0
        boards: dict[Section, Callable[[Any], Any]] = {
            Section.POOLS: PoolBoard.create,
            Section.CREATES: CreatesBoard.create,
            Section.CNI_STATUS: StatusBoard.create,
            Section.VERDICTS: VerdictBoard.create,
            Section.LOST_PORTS: LostPortBoard.create,
            Section.LOAD_BALANCERS: LoadBalancerBoard.create,
            Section.POLICIES: PolicyBoard.create}
        shared = {s.value: boards[s](ctx) for s in sections}
        state = cls(slots, globals_, summary, metrics, clock=clock,
                    active=active, **shared)
        state.sections = frozenset(sections)
        return state

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

    def set_mode(self, mode: Mode, present: bool) -> bool:
        """Set or clear one of the controller's modes (written by the
        neutron_port handler's process); True when that changed it."""
        with self._local:
            before = Mode(int(self._globals[_MODES]))
            after = before | mode if present else before & ~mode
            self._globals[_MODES] = int(after)
        return after != before

    def modes(self) -> Mode:
        return Mode(int(self._globals[_MODES]))

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
