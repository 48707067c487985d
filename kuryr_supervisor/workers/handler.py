"""The Handler worker: the controller role's handlers in one process.

The handlers named in ``[controller] handlers`` are loaded from their entry
points and run, each in its own thread (one alone runs in the worker's main
thread). The worker's heartbeat is the handlers' own: it beats only while
every handler has beaten within a heartbeat interval and a half, so one hung
handler makes the worker stale and the supervisor restarts it. It is ready
once every handler said so. With ``[controller] leader_election`` the
handlers start only once this replica holds the Lease (a standby is ready,
so rolling updates proceed), and the worker exits (to be restarted as a
follower) if it loses it.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import ClassVar

from kuryr_supervisor.controller import handlers as handlers_mod
from kuryr_supervisor.controller.handlers import HandlerContext
from kuryr_supervisor.state import Component
from kuryr_supervisor.workers.base import Worker

LOG = logging.getLogger(__name__)

Loader = Callable[[list[str]], "list[tuple[str, handlers_mod.HandlerFactory]]"]


class HandlerWorker(Worker):
    name = "Handler"
    component = Component.HANDLER
    #: Finds the handler factories by name; replaced in tests.
    loader: ClassVar[Loader] = staticmethod(handlers_mod.load)

    def _context(self, name: str, ready: dict[str, bool]) -> HandlerContext:
        def set_ready(value: bool) -> None:
            if ready.get(name) != value:
                LOG.info("handler %s %s", name, "ready" if value else "not ready")
            ready[name] = value
            self.state.set_ready(self.component, all(ready.values()))
        return HandlerContext(self.conf, self.state, set_ready)

    def serve(self) -> None:
        names = list(self.conf.controller.handlers)
        factories = type(self).loader(names)
        ready = {name: False for name, _ in factories}
        beats = {name: time.monotonic() for name, _ in factories}
        runners = [(name, factory(self._context(name, ready)))
                   for name, factory in factories]
        if self.conf.controller.leader_election:
            from kuryr_supervisor.controller.leader import wait_for_leadership
            # A standby replica is ready: were it not, a rolling update
            # would wait forever for a new pod while the old one leads.
            self.state.set_ready(self.component, True)
            if not wait_for_leadership(self.conf, self.stopping, self.beat):
                return
            self.state.set_ready(self.component, False)
        if len(runners) == 1:
            name, runner = runners[0]
            LOG.info("running handler %s", name)
            runner.run(self.stopping, self.beat)
            return
        threads = []
        for name, runner in runners:
            def beat(name: str = name) -> None:
                beats[name] = time.monotonic()
            thread = threading.Thread(target=self._guard, args=(name, runner, beat),
                                      name=f"handler-{name}", daemon=True)
            thread.start()
            threads.append(thread)
        interval = self.heartbeat_interval
        reported: list[str] = []
        while not self.stopping.wait(interval / 2):
            now = time.monotonic()
            late = sorted(n for n, at in beats.items() if now - at > 1.5 * interval)
            if late != reported:
                if late:
                    LOG.warning("handler(s) %s stopped beating: the worker "
                                "stops vouching for itself", ", ".join(late))
                reported = late
            if not late:
                self.beat()
        for thread in threads:
            thread.join(timeout=2)

    def _guard(self, name: str, runner: handlers_mod.Handler,
               beat: Callable[[], None]) -> None:
        """A handler thread that dies takes the worker with it (restart)."""
        try:
            runner.run(self.stopping, beat)
        except BaseException:
            LOG.exception("handler %s crashed", name)
            os._exit(1)
