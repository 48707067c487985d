"""What the master decides about its workers: a pure function of the shared
state, the restart history, the limits and the clock.

The master's thread (:mod:`kuryr_supervisor.master.manager`) only carries out the
:class:`Action` values returned here, so every rule of the remediation ladder
is tested without processes:

* a worker whose heartbeat is older than its deadline is stale → its stacks
  are dumped and it is killed (cotyledon then restarts it);
* a worker whose USS passes ``max_worker_memory`` is restarted gracefully
  (except the HealthManager, :data:`MEMORY_EXEMPT`);
* more than ``max_restarts`` restarts within ``restart_window`` exhausts the
  restart budget (liveness fails); under ``worker_death_policy = exit`` the
  master exits with the documented status, as it does for any liveness cause
  that restarting a worker cannot fix.
"""
from __future__ import annotations

import collections
import dataclasses
import enum
from collections.abc import Iterable

from oslo_config import cfg

from kuryr_supervisor.exitcodes import EXIT_FOR_CAUSE, ExitCode
from kuryr_supervisor.state import Component, ComponentStatus, Overall, Reason, WorkerKind

MIB = 1024 * 1024
_BACKOFF_BASE = 0.25


@dataclasses.dataclass(frozen=True)
class Limits:
    """The mutable supervision options, read afresh each cycle (SIGHUP)."""

    policy: str
    max_restarts: int
    restart_window: float
    backoff_max: float
    deadlines: dict[WorkerKind, float]
    max_worker_memory: int  # bytes; <= 0 disables
    checker_deadline: float

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> Limits:
        sup = conf.supervisor
        mem = sup.max_worker_memory
        return cls(
            policy=sup.worker_death_policy,
            max_restarts=sup.max_restarts,
            restart_window=sup.restart_window,
            backoff_max=sup.restart_backoff_max,
            deadlines={WorkerKind.WATCHER: sup.watcher_deadline,
                       WorkerKind.SERVER: sup.server_deadline,
                       WorkerKind.HEALTH: sup.health_deadline,
                       WorkerKind.HANDLER: sup.handler_deadline},
            max_worker_memory=mem * MIB if mem > 0 else 0,
            checker_deadline=conf.health.checker_deadline)


#: Never recycled for max_worker_memory: the HealthManager is what explains
#: every other failure (/status); a limit set too low must not silence it.
#: The daemon-wide max_memory_usage (liveness) still counts its memory.
MEMORY_EXEMPT = frozenset({Component.HEALTH})


class Verb(enum.Enum):
    KILL_STALE = "kill-stale"
    RECYCLE = "recycle"       # graceful restart (memory)
    EXIT = "exit"


@dataclasses.dataclass(frozen=True)
class Action:
    verb: Verb
    component: Component | None = None
    pid: int = 0
    code: ExitCode = ExitCode.OK
    why: str = ""


class RestartLedger:
    """Restart times per component, pruned to the restart window."""

    def __init__(self) -> None:
        self._times: collections.defaultdict[
            Component, collections.deque[float]] = collections.defaultdict(
                collections.deque)

    def record(self, comp: Component, now: float) -> None:
        self._times[comp].append(now)

    def _prune(self, now: float, window: float) -> None:
        for times in self._times.values():
            while times and now - times[0] > window:
                times.popleft()

    def count(self, now: float, window: float,
              comp: Component | None = None) -> int:
        self._prune(now, window)
        if comp is not None:
            return len(self._times[comp])
        return sum(len(t) for t in self._times.values())

    def exhausted(self, now: float, limits: Limits) -> bool:
        return self.count(now, limits.restart_window) > limits.max_restarts

    def backoff(self, comp: Component, now: float, limits: Limits) -> float:
        """Delay before restarting ``comp``, whose death was just recorded.

        The first restart in a window is immediate (fast recovery is the
        point); a worker that keeps dying waits 0.25 s, 0.5 s, 1 s ... up to
        ``restart_backoff_max``.
        """
        previous = self.count(now, limits.restart_window, comp) - 1
        if previous <= 0:
            return 0.0
        return min(limits.backoff_max, _BACKOFF_BASE * 2 ** (previous - 1))


def classify_death(exit_code: int, pending: Reason | None) -> Reason:
    """Why a worker died: what the master asked for, else its exit status."""
    if pending is not None:
        return pending
    return Reason.KILLED if exit_code < 0 else Reason.EXITED


def inspect(statuses: Iterable[ComponentStatus], overall: Overall,
            budget_exhausted: bool, limits: Limits, now: float) -> list[Action]:
    """The actions the master must take now."""
    actions: list[Action] = []
    for st in statuses:
        if not st.alive or not st.pid:
            continue
        age = st.heartbeat_age(now)
        deadline = limits.deadlines[st.component.kind]
        if age > deadline:
            actions.append(Action(
                Verb.KILL_STALE, st.component, st.pid,
                why=f"{st.component.label} stale: no heartbeat for "
                    f"{age:.1f}s (deadline {deadline:g}s, pid {st.pid})"))
        elif (limits.max_worker_memory and st.component not in MEMORY_EXEMPT
              and st.memory > limits.max_worker_memory):
            actions.append(Action(
                Verb.RECYCLE, st.component, st.pid,
                why=f"{st.component.label} uses {st.memory // MIB} MiB, above "
                    f"max_worker_memory {limits.max_worker_memory // MIB} MiB"))
    if limits.policy != "exit":
        return actions
    if budget_exhausted:
        actions.append(Action(
            Verb.EXIT, code=ExitCode.RESTART_BUDGET,
            why=f"more than {limits.max_restarts} worker restarts within "
                f"{limits.restart_window:g}s"))
    elif (not overall.live and overall.cause in EXIT_FOR_CAUSE
          and now - overall.checked_at <= limits.checker_deadline):
        actions.append(Action(Verb.EXIT, code=EXIT_FOR_CAUSE[overall.cause],
                              why=overall.summary))
    return actions
