"""The common shell of every worker: registration, heartbeat, reload, exit.

Why the heartbeat is driven by the worker's own loop (``beat()``) and not by a
timer thread: a timer keeps ticking when the loop that matters is deadlocked,
so the supervisor would never see the hang. Leaving when the master dies is
the opposite: it must not depend on the loop (:func:`exit_with_master`).
"""
from __future__ import annotations

import ctypes
import faulthandler
import logging
import os
import select
import signal
import threading
import time
from typing import ClassVar

import cotyledon
from cotyledon.types import WorkerId
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.exitcodes import ExitCode
from kuryr_supervisor.state import Component, Reason, SharedState, WorkerKind
from kuryr_supervisor.workers import priority

LOG = logging.getLogger(__name__)

#: The supervisor sends this before killing a stale worker; faulthandler
#: writes every thread's Python stack to stderr (the daemon's log).
STACK_DUMP_SIGNAL = signal.SIGUSR1


_PR_SET_PDEATHSIG = 1
#: Polling interval of the master watch where pidfd_open is missing.
_PPID_POLL = 0.1


def exit_with_master(master_pid: int) -> None:
    """Leave within a moment of the master's death, whatever the main loop
    is doing (busy, blocked in a call, SIGSTOPped).

    Two kernel mechanisms, because cotyledon forks from a helper thread of
    the master that ends at every graceful shutdown:

    - a thread waiting on a pidfd of the master (woken by the kernel when it
      exits, no polling) that calls ``os._exit`` at once with
      :attr:`ExitCode.ORPHANED`: it needs no help from the main loop;
    - ``PR_SET_PDEATHSIG`` with SIGCONT: when the forking thread (or the
      master) ends, a stopped worker is resumed so that thread can run.
      SIGKILL there would kill workers that are still draining after a
      SIGTERM, because the forking thread ends first.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGCONT), 0, 0, 0)
    except (OSError, AttributeError):     # not Linux: the watch alone
        LOG.debug("prctl(PR_SET_PDEATHSIG) unavailable")
    if os.getppid() != master_pid:        # died before we could ask
        os._exit(ExitCode.ORPHANED)
    try:
        pidfd: int | None = os.pidfd_open(master_pid)
    except (OSError, AttributeError):
        pidfd = None
    threading.Thread(target=_watch_master, args=(master_pid, pidfd),
                     name="master-watch", daemon=True).start()


def _watch_master(master_pid: int, pidfd: int | None) -> None:
    if pidfd is not None:
        select.select([pidfd], [], [])
    else:
        while os.getppid() == master_pid:
            time.sleep(_PPID_POLL)
    # Not LOG: a logging lock held by the frozen main thread would hang us.
    os.write(2, f"kuryr-supervisor worker {os.getpid()}: master "
                f"{master_pid} is gone, exiting\n".encode())
    os._exit(ExitCode.ORPHANED)


class Worker(cotyledon.Service):
    """Base of the Watcher, Server, Handler and HealthManager workers."""

    kind: ClassVar[WorkerKind]
    #: This process's slot: the ``worker_id``-th of its kind (the master
    #: starts one process per slot of the kind, e.g. one per handler).
    component: Component

    def __init__(self, worker_id: WorkerId, state: SharedState,
                 conf: cfg.ConfigOpts, master_pid: int) -> None:
        super().__init__(worker_id)
        self.component = state.of_kind(self.kind)[worker_id]
        self.state = state
        self.conf = conf
        self._master_pid = master_pid
        self.stopping = threading.Event()
        faulthandler.register(STACK_DUMP_SIGNAL, all_threads=True, chain=False)
        state.register(self.component, os.getpid())
        LOG.info("%s worker started (pid %d)", self.component.label, os.getpid())

    # -- for subclasses -----------------------------------------------------
    def serve(self) -> None:
        """Do the worker's job until ``self.stopping`` is set; call ``beat()``
        at least every ``heartbeat_interval``."""
        while not self.stopping.wait(self.heartbeat_interval):
            self.beat()

    def drain(self) -> None:
        """Stop taking work and finish what is in flight (SIGTERM)."""

    def reloaded(self) -> None:
        """Mutable options were re-read (SIGHUP); apply them."""

    # -- shell ----------------------------------------------------------------
    @property
    def heartbeat_interval(self) -> float:
        return float(self.conf.supervisor.heartbeat_interval)

    def beat(self) -> None:
        """Prove liveness; leave at once if the master is gone (no orphan)."""
        if os.getppid() != self._master_pid:
            LOG.error("%s: master %d is gone, exiting",
                      self.component.label, self._master_pid)
            os._exit(ExitCode.ORPHANED)
        self.state.heartbeat(self.component)

    def run(self) -> None:
        exit_with_master(self._master_pid)
        priority.apply(self.kind, self.conf)
        self.beat()
        self.serve()

    def terminate(self) -> None:
        self.stopping.set()
        if os.getppid() == self._master_pid:
            self.drain()
        self.state.mark_down(self.component, Reason.STOPPING)
        LOG.info("%s worker stopped", self.component.label)

    def reload(self) -> None:
        # Default cotyledon behaviour would restart the worker; SIGHUP must
        # apply mutable options in place instead.
        if conf_mod.reload(self.conf):
            self.reloaded()
