"""The master process: a cotyledon ServiceManager that governs the workers.

It is the same for every role: it is handed a
:class:`~kuryr_supervisor.master.roles.base.Role`, which names the
listeners, the shared-state slots and sections, the workers with their
arguments, and the hooks (:mod:`kuryr_supervisor.master.roles`). It creates
the shared state once (from its explicit ``fork`` context), adds each of the
role's workers to cotyledon (``role = cni``: Watcher, Server and
HealthManager; ``role = controller``: one Handler process per configured
handler, and the HealthManager), and runs a governor thread that carries
out :func:`kuryr_supervisor.master.supervisor.inspect`'s decisions and feeds the
:class:`~kuryr_supervisor.master.reporting.Reporter`. Worker deaths arrive through
cotyledon's own ``dead_worker`` hook: the master reaps nothing itself, so it
never races cotyledon's SIGCHLD handling.

It owns every listening socket (:mod:`kuryr_supervisor.master.listeners`):
they are bound before the first fork and passed to the Server and the
HealthManager as arguments, so every incarnation of a worker serves the
same socket; the governor watches the CNI socket file; the sockets are
closed after the last worker has stopped, and the role's ``stopped``
hooks run then (the CNI role's checkpoints the IPAM store and the pod
registry, so a graceful stop leaves no ``-wal`` behind).
"""
from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import signal
import threading
import time
from typing import Any, NoReturn

import cotyledon
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.exitcodes import ExitCode
from kuryr_supervisor.master import interrupt
from kuryr_supervisor.master import listeners as listeners_mod
from kuryr_supervisor.master.reporting import Reporter
from kuryr_supervisor.master.roles import Hooks, Role
from kuryr_supervisor.master.sdnotify import Notifier
from kuryr_supervisor.master.supervisor import (
    Action,
    Limits,
    RestartLedger,
    Verb,
    classify_death,
    inspect,
)
from kuryr_supervisor.state import Component, Reason, SharedState
from kuryr_supervisor.workers.base import STACK_DUMP_SIGNAL

LOG = logging.getLogger(__name__)

_STACK_DUMP_GRACE = 0.3


def freeze_before_fork() -> None:
    """Keep the pages the workers share with the master shared.

    A worker's garbage collector visits every tracked object it inherited
    and writes to its header, so each collection turns shared pages into
    private copies. Objects moved to the permanent generation are never
    visited: freeze the master's heap before the first fork (without a
    collection first: the holes it would free are what a child's first
    allocations would fill, copying those pages). Workers restarted later
    are forked from the same frozen heap. Measured with the memory
    benchmark (docs: measurements); what growth is left is the Server's first use of
    its inherited heap (reference counts, allocator pools), not a leak.
    """
    gc.freeze()


class Manager(cotyledon.ServiceManager):
    """The master of ``role``'s workers (see the module); ``hooks``: the
    role's for this start (:meth:`Role.hooks`)."""

    def __init__(self, conf: cfg.ConfigOpts, role: Role, *,
                 notifier: Notifier, hooks: Hooks | None = None) -> None:
        self.listeners = listeners_mod.open_or_exit(conf, role.listeners)
        ctx = multiprocessing.get_context("fork")
        super().__init__(
            graceful_shutdown_timeout=conf.supervisor.graceful_shutdown_timeout,
            mp_context=ctx)
        self.conf = conf
        self.role = role
        self.hooks = hooks if hooks is not None else role.hooks(conf)
        self.state = SharedState.create(ctx, active=role.components(conf),
                                        sections=role.sections)
        self._reporter = Reporter(notifier, ready_hooks=self.hooks.ready)
        self._ledger = RestartLedger()
        self._lock = threading.Lock()
        self._pending: dict[int, Reason] = {}
        self._budget_logged = False
        self._exit_code: ExitCode | None = None
        self._stopping = threading.Event()
        #: cotyledon's (service, worker id) -> the worker's slot.
        self._by_service: dict[tuple[Any, int], Component] = {}
        master_pid = os.getpid()
        for worker, kwargs in role.workers(conf, self.listeners):
            # One process per slot of the worker's kind (a handler each).
            slots = self.state.of_kind(worker.kind)
            sid = self.add(worker, workers=len(slots),
                           args=(self.state, conf, master_pid),
                           kwargs=kwargs)
            for worker_id, comp in enumerate(slots):
                self._by_service[sid, worker_id] = comp
        self.register_hooks(on_terminate=self._on_terminate,
                            on_reload=self._on_reload,
                            on_dead_worker=self._on_dead_worker,
                            on_new_worker=interrupt.ignore_interrupt)

    # -- entry ---------------------------------------------------------------
    def run(self) -> NoReturn:
        threading.Thread(target=self._govern, name="governor",
                         daemon=True).start()
        freeze_before_fork()
        master = os.getpid()
        try:
            super().run()
        except SystemExit as exc:
            raise SystemExit(self._exit_code if self._exit_code is not None
                             else exc.code) from None
        finally:
            if os.getpid() == master:     # last: the workers are gone
                self.listeners.close()
                for hook in self.hooks.stopped:
                    hook()
        raise SystemExit(ExitCode.OK)  # pragma: no cover - run() never returns

    def _slowdown_respawn_if_needed(self) -> None:
        """Replace cotyledon's 5 s fork throttle with the restart ledger's
        backoff (applied in the dead-worker hook): the first restart of a
        killed worker must be immediate."""

    # -- cotyledon hooks -------------------------------------------------------
    def _on_dead_worker(self, service_id: Any, worker_id: int,
                        exit_code: int) -> None:
        comp = self._by_service[service_id, worker_id]
        status = self.state.component(comp)
        with self._lock:
            reason = classify_death(exit_code,
                                    self._pending.pop(status.pid, None))
        self.state.mark_down(comp, reason, exit_code)
        restarts = self.state.count_restart(comp)
        self.state.record_restart_cause(comp, reason)
        now = self.state.now()
        limits = Limits.from_conf(self.conf)
        with self._lock:
            self._ledger.record(comp, now)
            exhausted = self._ledger.exhausted(now, limits)
            delay = self._ledger.backoff(comp, now, limits)
        LOG.warning("%s worker (pid %d) %s (status %d); restart #%d",
                    comp.label, status.pid, reason.name.lower(), exit_code,
                    restarts)
        if exhausted:
            self._set_budget(True, limits)
            if limits.policy == "exit":
                self._dead.set()  # cotyledon: start no replacement
                self._request_exit(ExitCode.RESTART_BUDGET,
                                   "worker restart budget exhausted")
                return
        if delay:
            LOG.info("restarting %s in %.2fs (backoff)", comp.label, delay)
            self._dead.wait(delay)

    def _on_signal_received(self, sig: int) -> None:
        """Ctrl-C stops gracefully, a second one at once (:mod:`.interrupt`)."""
        if sig == signal.SIGINT:
            LOG.info("SIGINT: stopping gracefully (again to stop at once)")
        super()._on_signal_received(interrupt.on_first(sig))

    def _on_terminate(self) -> None:
        self._stopping.set()
        self.state.set_draining()
        self._reporter.stopping()
        LOG.info("draining: readiness fails, in-flight work finishes")

    def _on_reload(self) -> None:
        conf_mod.reload(self.conf)

    # -- governor --------------------------------------------------------------
    def _govern(self) -> None:
        while not self._stopping.wait(self._tick_interval()):
            try:
                self._tick()
            except Exception:  # noqa: BLE001 - the governor must survive
                LOG.exception("governor cycle failed")

    def _tick_interval(self) -> float:
        return min(0.25, self.conf.supervisor.heartbeat_interval / 2)

    def _tick(self) -> None:
        try:
            self.listeners.watch()
        except Exception:  # noqa: BLE001 - the rest of the tick must run
            LOG.exception("watching the CNI socket failed")
        limits = Limits.from_conf(self.conf)
        now = self.state.now()
        with self._lock:
            exhausted = self._ledger.exhausted(now, limits)
        self._set_budget(exhausted, limits)
        overall = self.state.overall()
        for action in inspect(self.state.components(), overall, exhausted,
                              limits, now):
            self._carry_out(action)
        self._reporter.update(overall, ever_ready=self.state.ever_ready(),
                              now=now, checker_deadline=limits.checker_deadline)

    def _set_budget(self, exhausted: bool, limits: Limits) -> None:
        if exhausted == self.state.restart_budget_exceeded():
            return
        self.state.set_restart_budget_exceeded(exhausted)
        if exhausted:
            LOG.error("restart budget exhausted: more than %d worker restarts "
                      "within %gs; liveness fails", limits.max_restarts,
                      limits.restart_window)
        else:
            LOG.info("restart budget available again")

    def _carry_out(self, action: Action) -> None:
        if action.verb is Verb.EXIT:
            self._request_exit(action.code, action.why)
            return
        assert action.component is not None
        reason = Reason.STALE if action.verb is Verb.KILL_STALE else Reason.MEMORY
        with self._lock:
            self._pending[action.pid] = reason
        self.state.mark_down(action.component, reason)
        try:
            if action.verb is Verb.KILL_STALE:
                LOG.warning("%s; dumping its stacks and killing it", action.why)
                os.kill(action.pid, signal.SIGCONT)
                os.kill(action.pid, STACK_DUMP_SIGNAL)
                time.sleep(_STACK_DUMP_GRACE)
                os.kill(action.pid, signal.SIGKILL)
            else:
                LOG.warning("%s; restarting it gracefully", action.why)
                os.kill(action.pid, signal.SIGTERM)
        except ProcessLookupError:
            LOG.debug("worker %d already gone", action.pid)

    def _request_exit(self, code: ExitCode, why: str) -> None:
        if self._exit_code is not None:
            return
        self._exit_code = code
        LOG.error("exiting with status %d (%s): %s", int(code), code.name, why)
        os.kill(os.getpid(), signal.SIGTERM)
