"""The Handler worker vouches for itself only while every handler beats."""
from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable

from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.controller.handlers import HandlerContext
from kuryr_supervisor.state import CONTROLLER_COMPONENTS, Component, SharedState
from kuryr_supervisor.workers.handler import HandlerWorker


class Beating:
    """Beats until ``hang`` is set, then stops beating (but keeps running)."""

    def __init__(self, ctx: HandlerContext) -> None:
        self.ctx = ctx
        self.hang = threading.Event()

    def run(self, stopping: threading.Event, beat: Callable[[], None]) -> None:
        self.ctx.ready(True)
        while not stopping.wait(0.02):
            if not self.hang.is_set():
                beat()


def test_one_hung_handler_makes_the_worker_stale() -> None:
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override("heartbeat_interval", 0.1, "supervisor")
    conf.set_override("handlers", ["a", "b"], "controller")
    made: dict[str, Beating] = {}

    def factory(name: str) -> Callable[[HandlerContext], Beating]:
        def make(ctx: HandlerContext) -> Beating:
            made[name] = Beating(ctx)
            return made[name]
        return make

    class Worker(HandlerWorker):
        loader = staticmethod(lambda names: [(n, factory(n)) for n in names])

    state = SharedState.create(multiprocessing.get_context("fork"),
                               active=CONTROLLER_COMPONENTS)
    worker = Worker(0, state, conf, os.getppid())  # type: ignore[arg-type]
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        time.sleep(0.5)
        slot = state.component(Component.HANDLER)
        assert slot.ready and slot.heartbeat_age(state.now()) < 0.2
        made["b"].hang.set()
        time.sleep(0.6)
        assert state.component(Component.HANDLER).heartbeat_age(state.now()) > 0.3
        made["b"].hang.clear()
        time.sleep(0.3)
        assert state.component(Component.HANDLER).heartbeat_age(state.now()) < 0.2
    finally:
        worker.stopping.set()
        thread.join(5)
    assert not thread.is_alive()
    assert [c.component for c in state.components()] == list(CONTROLLER_COMPONENTS)
