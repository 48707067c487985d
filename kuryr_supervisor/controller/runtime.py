"""The handler runtime: what a handler process gives its handler.

A handler is built once its clients exist, by one function of its own
(its entry point, :mod:`.handlers`), every collaborator passed to its
constructor. What every handler needs is the same, so it is built here,
once per process, and not by each handler:

- the clients: the Kubernetes client (:meth:`Runtime.kubernetes`) and the
  OpenStack adapter (:meth:`Runtime.openstack`), both fenced by the
  process's write fence and naming its master in their User-Agent, the
  adapter beating the process's heartbeat while a call waits; each built
  on first ask (a handler that needs no cloud makes none), then the same
  one;
- the informer (:meth:`Runtime.informer`): the standard loop (list, then
  watch, resume, relist, backoff) with the configured heartbeat interval,
  backoff and stall timeout, ready once listed;
- the hooks: :meth:`Runtime.ready`, :meth:`Runtime.failed`,
  :meth:`Runtime.succeeded` (the handler's own slot and failure count);
- the heartbeat as collaborators built before ``run`` call it
  (:attr:`Runtime.beat`: the beat ``run`` is given, none before), and the
  end of ``run`` that a graceful stop waits for (:meth:`Runtime.running`,
  :meth:`Runtime.finish`).

What the process hands its handler besides, built where the process is
assembled (:mod:`kuryr_supervisor.workers.handler`), is the
:class:`HandlerContext`: the options, the shared state, the write fence
(closed once the replica lost its Lease; open without leader election),
where port creates are announced to a successor
(:mod:`~kuryr_supervisor.controller.leadership.announcer`), and the
replica's master (its clients name it in their User-Agent and its Lease
identity, :func:`~kuryr_supervisor.controller.leadership.election.
identity`, holds it).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

from oslo_config import cfg

from kuryr_supervisor.controller.leadership.announcer import Announcer
from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes.fence import WriteFence
from kuryr_supervisor.kubernetes.informer import Informer, Sink, Source
from kuryr_supervisor.state import Component, SharedState

LOG = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds a watch may stay silent beyond the client's read timeout.
STALL_MARGIN = 5.0


@dataclasses.dataclass(frozen=True)
class HandlerContext:
    """What the handler process hands its handler (see the module)."""

    conf: cfg.ConfigOpts
    state: SharedState | None
    ready: Callable[[bool], None]
    #: The handler's own slot (None outside a daemon: nothing is counted).
    component: Component | None = None
    #: What every write asks first (see the module); open by default.
    fence: WriteFence = dataclasses.field(default_factory=WriteFence)
    #: Where port creates are announced (None: nowhere, outside a daemon).
    announcer: Announcer | None = None
    #: The replica's master (outside a daemon, this process: its own).
    master_pid: int = dataclasses.field(default_factory=os.getpid)

    def failed(self) -> int:
        """Count one failed step; returns the consecutive count."""
        if self.state is None or self.component is None:
            return 0
        return self.state.record_handler_failure(self.component)

    def succeeded(self) -> None:
        if self.state is not None and self.component is not None:
            self.state.record_handler_success(self.component)


def _still() -> None:
    """No heartbeat yet: ``run`` has not started."""


class Heartbeat:
    """The process's heartbeat as collaborators built before ``run`` call
    it: the beat :meth:`Runtime.running` was given (nothing before)."""

    def __init__(self) -> None:
        self._beat: Callable[[], None] = _still

    def __call__(self) -> None:
        self._beat()

    def follow(self, beat: Callable[[], None]) -> None:
        """From now on, a call beats ``beat``."""
        self._beat = beat


class Runtime:
    """One handler process's runtime (see the module). ``kubernetes`` and
    ``openstack``: clients already built (tests, tools), instead of those
    of the configuration."""

    def __init__(self, ctx: HandlerContext, *,
                 kubernetes: k8s.K8sClient | None = None,
                 openstack: osa.OpenStack | None = None) -> None:
        self.ctx = ctx
        self.conf = ctx.conf
        self.beat = Heartbeat()
        self._kubernetes = kubernetes
        self._openstack = openstack
        self._started = threading.Event()
        self._finished = threading.Event()

    # -- the clients ---------------------------------------------------------
    def kubernetes(self) -> k8s.K8sClient:
        """The process's Kubernetes client (built on first ask)."""
        if self._kubernetes is None:
            self._kubernetes = k8s.K8sClient.from_conf(
                self.conf, fence=self.ctx.fence,
                master_pid=self.ctx.master_pid)
        return self._kubernetes

    def openstack(self) -> osa.OpenStack:
        """The process's OpenStack adapter (built on first ask), beating
        :attr:`beat` while a call waits."""
        if self._openstack is None:
            self._openstack = osa.OpenStack.from_conf(
                self.conf, fence=self.ctx.fence,
                master_pid=self.ctx.master_pid, beat=self.beat)
        return self._openstack

    def informer(self, source: Source[T], sink: Sink[T], *,
                 heartbeat: Callable[[], None], what: str = "pod",
                 wake_in: Callable[[], float] = lambda: math.inf,
                 on_synced: Callable[[], None] | None = None
                 ) -> Informer[T]:
        """The standard watch of ``source`` into ``sink``: the configured
        heartbeat interval and backoff, stalled after the client's read
        timeout, the handler ready once listed (``on_synced``: what to do
        instead, for a handler ready only later); ``heartbeat`` is the
        handler's tick, ``wake_in`` when it wants the next one sooner."""
        conf = self.conf
        return Informer(
            source, sink, heartbeat=heartbeat, what=what,
            heartbeat_interval=float(conf.supervisor.heartbeat_interval),
            backoff_max=float(conf.watcher.backoff_max),
            stall_timeout=self.kubernetes().watch_read_timeout + STALL_MARGIN,
            on_synced=on_synced or (lambda: self.ready(True)),
            wake_in=wake_in)

    # -- the hooks -----------------------------------------------------------
    def ready(self, value: bool) -> None:
        """The handler has caught up (or no longer has)."""
        self.ctx.ready(value)

    def failed(self) -> int:
        """Count one failed step; returns the consecutive count."""
        return self.ctx.failed()

    def succeeded(self) -> None:
        """A step went well: the consecutive count starts again."""
        self.ctx.succeeded()

    # -- running and finishing -------------------------------------------------
    @contextlib.contextmanager
    def running(self, beat: Callable[[], None]) -> Iterator[None]:
        """Around a handler's ``run``: :attr:`beat` beats ``beat``, and
        :meth:`finish` waits for the block to end."""
        self.beat.follow(beat)
        self._started.set()
        try:
            yield
        finally:
            self._finished.set()

    def finish(self, timeout: float, what: str) -> None:
        """A graceful stop (``stopping`` already set): wait at most
        ``timeout`` seconds for the handler's :meth:`running` block to end,
        its last work included; ``what`` names the handler in the log."""
        if self._started.is_set() and not self._finished.wait(timeout):
            LOG.warning("%s still busy at the end of the graceful shutdown "
                        "budget", what)
