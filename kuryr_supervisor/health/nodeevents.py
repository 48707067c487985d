"""What happened to the daemon, as Events on its Node (Kubernetes mode).

The HealthManager already sees everything worth telling ``kubectl describe
node`` through the shared state: the master counts each restart with its
cause and exit status, flags an exhausted restart budget, the Server counts
CNI failures and raises environment faults, and the monitor publishes the
verdict. :class:`NodeEventSource` compares one look at the shared state with
the previous one and turns each change into a
:class:`~kuryr_supervisor.kubernetes.events.Note`:

* ``WorkerRestarted`` (Warning): which worker, why (signal, exit status,
  stale heartbeat, memory limit) and how long it took to be back (the time
  from the first look that saw it gone to the new process's registration,
  so within one poll interval);
* ``RestartBudgetExhausted``, ``CNIFailureBudgetExhausted``,
  ``HandlerFailureBudgetExhausted`` (Warning);
* ``NotReady``/``Ready`` and ``NotLive``/``Live``, with the verdict's summary
  (not before the daemon was first ready: starting is not news; NotReady
  with hysteresis, :mod:`.verdictnotes`);
* ``EnvironmentFault`` (Warning) and ``EnvironmentFaultCleared``.

:class:`NodeEvents` polls on its own thread (shared memory only, every 0.1 s)
and hands the notes to the recorder's bounded queue: neither the probe path
nor the HealthManager's loop ever waits for the API.
"""
from __future__ import annotations

import dataclasses
import logging
import signal
from collections.abc import Callable

from oslo_config import cfg

from kuryr_supervisor.health.checks.faults import describe
from kuryr_supervisor.health.pollloop import PollLoop
from kuryr_supervisor.health.verdictnotes import VerdictNotes
from kuryr_supervisor.kubernetes.events import EventRecorder, Note
from kuryr_supervisor.state import (
    Component,
    ComponentStatus,
    Fault,
    Reason,
    SharedState,
    WorkerKind,
)

LOG = logging.getLogger(__name__)

POLL_INTERVAL = 0.1
#: A worker not back this long after its death is reported without waiting.
NOT_BACK = 10.0
_NAMES = {WorkerKind.WATCHER: "Watcher", WorkerKind.SERVER: "Server",
          WorkerKind.HEALTH: "HealthManager", WorkerKind.HANDLER: "Handler"}
WARNING, NORMAL = "Warning", "Normal"


def worker_name(comp: Component) -> str:
    name = _NAMES[comp.kind]
    return f"{name} {comp.handler}" if comp.handler else name


def why(reason: Reason | None, exit_code: int) -> tuple[str, str]:
    """(the cause in words, the cause as a key word)."""
    if reason is Reason.STALE:
        return "stopped heartbeating (stale) and was killed", "stale"
    if reason is Reason.MEMORY:
        return ("passed [supervisor] max_worker_memory and was restarted",
                "memory")
    if exit_code < 0:
        try:
            sig = signal.Signals(-exit_code).name
        except ValueError:
            sig = "unknown"
        return f"was killed by signal {-exit_code} ({sig})", f"signal{-exit_code}"
    return f"exited with status {exit_code}", f"exit{exit_code}"


@dataclasses.dataclass
class _Gone:
    pid: int
    at: float            # monotonic: the first look that saw it gone
    causes: dict[Reason, int]


class NodeEventSource:
    """One :meth:`poll` compares the shared state with the last one."""

    def __init__(self, state: SharedState, conf: cfg.ConfigOpts,
                 emit: Callable[[Note], object]) -> None:
        self.state, self.conf, self._emit = state, conf, emit
        now = state.now()
        self._last = now
        comps = state.components()
        self._restarts = {c.component: c.restarts for c in comps}
        self._pids = {c.component: c.pid for c in comps}
        self._causes = state.restarts_by_cause()
        self._gone: dict[Component, _Gone] = {}
        self._budget = state.restart_budget_exceeded()
        self._exhausted: set[str] = set()
        self._verdict = VerdictNotes(emit)
        self._faults = Fault.NONE
        own = next((c for c in comps if c.component == Component.HEALTH), None)
        if own is not None and own.restarts:       # this process is the restart
            text, word = why(None, own.exit_code)
            self._emit(Note(WARNING, "WorkerRestarted",
                            f"HealthManager worker {text}; back as pid "
                            f"{own.pid} (restart #{own.restarts})",
                            f"{Component.HEALTH.label}/{word}"))

    def poll(self) -> None:
        now = self.state.now()
        stopping = self.state.draining()     # workers leave, none restarts
        for status in self.state.components():
            if status.component != Component.HEALTH and not stopping:
                self._worker(status, now)
        self._budgets()
        self._verdict.update(self.state.overall(),
                             ever_ready=self.state.ever_ready(), now=now)
        self._environment()
        self._last = now

    # -- workers ---------------------------------------------------------------
    def _worker(self, st: ComponentStatus, now: float) -> None:
        comp = st.component
        old = self._pids.get(comp, 0)
        if comp not in self._gone and (
                st.restarts > self._restarts.get(comp, 0) or
                (old and not st.alive and st.reason is not Reason.STOPPING)):
            # Gone now, or between the last look and this one.
            at = now if not st.alive else self._last
            self._gone[comp] = _Gone(old, at, self._causes_of(comp))
        self._restarts[comp] = st.restarts
        gone = self._gone.get(comp)
        if gone is not None:
            back = st.alive and st.pid and st.pid != gone.pid
            if back or now - gone.at > NOT_BACK:
                del self._gone[comp]
                self._emit(self._restarted(st, gone, now, bool(back)))
        if st.alive and st.pid:
            self._pids[comp] = st.pid

    def _causes_of(self, comp: Component) -> dict[Reason, int]:
        return {reason: n for (c, reason), n in
                self.state.restarts_by_cause().items() if c == comp}

    def _restarted(self, st: ComponentStatus, gone: _Gone, now: float,
                   back: bool) -> Note:
        causes = self._causes_of(st.component)
        grown = [r for r, n in causes.items() if n > gone.causes.get(r, 0)]
        reason = grown[-1] if grown else (st.reason if not st.alive else None)
        text, word = why(reason, st.exit_code)
        name = worker_name(st.component)
        pid = f" (pid {gone.pid})" if gone.pid else ""
        after = (f"back as pid {st.pid} after {max(0.0, st.started - gone.at):.2f}s"
                 if back else f"not back after {now - gone.at:.0f}s")
        return Note(WARNING, "WorkerRestarted",
                    f"{name} worker{pid} {text}; {after} (restart "
                    f"#{st.restarts})", f"{st.component.label}/{word}")

    # -- budgets, verdict, faults -------------------------------------------------
    def _budgets(self) -> None:
        sup = self.conf.supervisor
        budget = self.state.restart_budget_exceeded()
        if budget and not self._budget:
            self._emit(Note(WARNING, "RestartBudgetExhausted",
                            f"more than {sup.max_restarts} worker restarts "
                            f"within {sup.restart_window:g}s; liveness fails "
                            f"(worker_death_policy {sup.worker_death_policy})"))
        self._budget = budget
        counts: dict[str, tuple[str, int, int]] = {}
        if Component.SERVER in self.state.active:
            counts["cni"] = ("CNIFailureBudgetExhausted",
                             self.state.cni_failures(),
                             self.conf.cni_daemon.cni_failures_count)
        for comp, n in self.state.handler_failures().items():
            counts[comp.label] = ("HandlerFailureBudgetExhausted", n,
                                  self.conf.controller.handler_failures_count)
        for key, (reason, count, limit) in counts.items():
            if count >= limit and key not in self._exhausted:
                self._exhausted.add(key)
                what = "internal CNI ADD failures" if key == "cni" else \
                    f"failed steps of {key}"
                self._emit(Note(WARNING, reason, f"{count} consecutive {what} "
                                f"(limit {limit}); liveness fails", key))
            elif count < limit:
                self._exhausted.discard(key)

    def _environment(self) -> None:
        faults = self.state.faults()
        for fault in Fault:
            if not fault or fault.name is None:
                continue
            if fault in faults and fault not in self._faults:
                self._emit(Note(WARNING, "EnvironmentFault",
                                describe(fault, self.conf), fault.name))
            elif fault in self._faults and fault not in faults:
                self._emit(Note(NORMAL, "EnvironmentFaultCleared",
                                f"{fault.name.lower()} fault cleared",
                                fault.name))
        self._faults = faults


class NodeEvents:
    """The source polled on its own thread, feeding the recorder."""

    def __init__(self, source: NodeEventSource, recorder: EventRecorder, *,
                 interval: float = POLL_INTERVAL) -> None:
        self.source, self.recorder = source, recorder
        self._loop = PollLoop(source.poll, interval=interval,
                              name="node-watch")

    def start(self) -> NodeEvents:
        self.recorder.start()
        self._loop.start()
        return self

    def stop(self) -> None:
        self._loop.stop()
        self.recorder.stop()


def from_conf(state: SharedState, conf: cfg.ConfigOpts, *,
              master_pid: int | None = None) -> NodeEvents | None:
    """Started node events for this daemon (built for the CNI role, by its
    object's choice: the controller is no node agent, its events are not
    the Node's); None standalone or when off (``master_pid``: the
    daemon's, named in its client's User-Agent)."""
    from kuryr_supervisor.kubernetes import client as k8s
    from kuryr_supervisor.kubernetes import events
    if not conf.health.node_events or not k8s.is_configured(conf):
        return None
    recorder = events.recorder(k8s.K8sClient.from_conf(
        conf, master_pid=master_pid))
    return NodeEvents(NodeEventSource(state, conf, recorder.record),
                      recorder).start()
