"""The Handler worker: one process per handler of the controller role.

The master starts one Handler process per name in ``[controller] handlers``
(cotyledon's ``workers=N``; the worker id picks the handler and its slot,
named ``handler:<name>``). Each process loads only its own handler from its
entry point and runs it in its main thread, and the handler's heartbeat is
the process's: so a handler that hangs is seen stale by name, and the
supervisor kills and restarts that handler's process alone while the others
go on. It is ready once its handler said so.

With ``[controller] leader_election`` the handler starts only once this
replica holds the Lease (a standby is ready, so rolling updates proceed); the
replica's handler processes share one identity (see
:func:`~kuryr_supervisor.controller.leadership.election.identity`), and a process exits
(to be restarted as a follower) if it loses the Lease.

The process is the handler's composition root: it builds the write fence
and the create announcer, then the handler runtime over them
(:class:`~kuryr_supervisor.controller.runtime.Runtime`: the clients, the
informer, the hooks), and hands that to the handler's build function.

On SIGTERM ``stopping`` is set, then the worker calls the handler's
``finish(timeout)`` (part of the handler contract): a handler that has
work left for a graceful stop (the network judge releasing its Node
conditions when uninstalling) waits there, at most the graceful shutdown
budget less a second, for ``run`` to have done it; any other returns at
once; then the process exits.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import ClassVar

from kuryr_supervisor.controller import handlers as handlers_mod
from kuryr_supervisor.controller.leadership import announcer
from kuryr_supervisor.controller.runtime import HandlerContext, Runtime
from kuryr_supervisor.kubernetes.fence import WriteFence
from kuryr_supervisor.state import WorkerKind
from kuryr_supervisor.workers.base import Worker

LOG = logging.getLogger(__name__)

Loader = Callable[[list[str]], "list[tuple[str, handlers_mod.HandlerFactory]]"]


class HandlerWorker(Worker):
    name = "Handler"
    kind = WorkerKind.HANDLER
    #: Finds the handler factories by name; replaced in tests.
    loader: ClassVar[Loader] = staticmethod(handlers_mod.load)
    #: The handler this process runs, once built.
    handler: handlers_mod.Handler | None = None

    def _set_ready(self, value: bool) -> None:
        if self.state.component(self.component).ready != value:
            LOG.info("handler %s %s", self.component.handler,
                     "ready" if value else "not ready")
        self.state.set_ready(self.component, value)

    def serve(self) -> None:
        """The composition root of a handler process: the write fence, the
        create announcer and the runtime are built here, once, and handed
        to the handler's build function."""
        name = self.component.handler
        [(_, factory)] = type(self).loader([name])
        fence = WriteFence()
        creates: announcer.Announcer | None = None
        if self.conf.controller.leader_election:
            from kuryr_supervisor.controller.leadership.election import (
                wait_for_leadership,
            )
            # A standby replica is ready: were it not, a rolling update
            # would wait forever for a new pod while the old one leads.
            self.state.set_ready(self.component, True)
            leading = wait_for_leadership(self.conf, self.stopping, self.beat,
                                          master_pid=self._master_pid)
            if leading is None:
                return
            self.state.set_ready(self.component, False)
            fence, creates = leading.fence, leading.announcer
        elif getattr(self.state, "creates", None) is not None:
            # No creates Lease: the port creates at Neutron are kept for
            # the process restarted in this one's place.
            creates = announcer.LocalCreates(self.state.creates)
        handler = factory(Runtime(HandlerContext(
            self.conf, self.state, self._set_ready, self.component,
            fence=fence, announcer=creates, master_pid=self._master_pid)))
        self.handler = handler
        LOG.info("running handler %s", name)
        handler.run(self.stopping, self.beat)

    def drain(self) -> None:
        """Let the handler finish its last work (see the module)."""
        if self.handler is not None:
            self.handler.finish(max(0.0, float(
                self.conf.supervisor.graceful_shutdown_timeout) - 1.0))
