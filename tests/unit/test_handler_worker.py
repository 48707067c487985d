"""Each Handler worker runs one handler and vouches for it alone: its own
slot, heartbeat, ready flag and failure count."""
from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.controller.runtime import Runtime
from kuryr_supervisor.state import (
    MAX_HANDLERS,
    Component,
    SharedState,
    WorkerKind,
    controller_components,
)
from kuryr_supervisor.workers.handler import HandlerWorker


class Beating:
    """Beats until ``hang`` is set, then stops beating (but keeps running)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt, self.ctx = rt, rt.ctx
        self.hang = threading.Event()
        #: The timeouts ``finish`` was called with.
        self.finished: list[float] = []

    def run(self, stopping: threading.Event, beat: Callable[[], None]) -> None:
        self.rt.ready(True)
        while not stopping.wait(0.02):
            if not self.hang.is_set():
                beat()

    def finish(self, timeout: float) -> None:
        self.finished.append(timeout)


def test_each_handler_has_its_own_slot_heartbeat_and_budget() -> None:
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override("heartbeat_interval", 0.1, "supervisor")
    conf.set_override("handlers", ["a", "b"], "controller")
    made: dict[str, Beating] = {}
    asked: list[list[str]] = []

    def load(names: list[str]) -> list[tuple[str, Callable[[Runtime], Beating]]]:
        asked.append(list(names))

        def make(rt: Runtime) -> Beating:
            made[names[0]] = Beating(rt)
            return made[names[0]]
        return [(names[0], make)]

    class Worker(HandlerWorker):
        loader = staticmethod(load)

    state = SharedState.create(multiprocessing.get_context("fork"),
                               active=controller_components(["a", "b"]))
    handler_a, handler_b = state.of_kind(WorkerKind.HANDLER)
    workers = [Worker(i, state, conf, os.getppid())  # type: ignore[arg-type]
               for i in (0, 1)]
    assert [w.component for w in workers] == [handler_a, handler_b]
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.5)
        assert sorted(asked) == [["a"], ["b"]]     # each loads its own only
        # The replica's master, as the worker was given it (User-Agent,
        # Lease identity): never the handler process's own pid.
        assert {made[n].ctx.master_pid for n in "ab"} == {os.getppid()}
        for comp in (handler_a, handler_b):
            slot = state.component(comp)
            assert slot.ready and slot.heartbeat_age(state.now()) < 0.2
        made["b"].hang.set()
        time.sleep(0.6)
        assert state.component(handler_b).heartbeat_age(state.now()) > 0.3
        assert state.component(handler_a).heartbeat_age(state.now()) < 0.2
        made["b"].hang.clear()
        time.sleep(0.3)
        assert state.component(handler_b).heartbeat_age(state.now()) < 0.2

        assert made["a"].ctx.failed() == 1 and made["a"].ctx.failed() == 2
        assert made["b"].ctx.failed() == 1
        made["b"].ctx.succeeded()                   # resets b's count only
        assert state.handler_failures() == {handler_a: 2, handler_b: 0}
    finally:
        for worker in workers:
            worker.stopping.set()
        for thread in threads:
            thread.join(5)
    assert not any(t.is_alive() for t in threads)
    assert [c.component.label for c in state.components()] == [
        "handler:a", "handler:b", "health"]
    # SIGTERM's drain: each handler's finish, with the graceful shutdown
    # budget less a second (part of the contract, not looked up).
    workers[0].drain()
    budget = float(conf.supervisor.graceful_shutdown_timeout) - 1.0
    assert made["a"].finished == [budget] and made["b"].finished == []


def test_handler_slots_are_bounded_and_apart_from_the_cni_slots() -> None:
    comps = controller_components([f"h{i}" for i in range(MAX_HANDLERS)])
    slots = [c.slot for c in comps]
    assert len(set(slots)) == len(slots) == MAX_HANDLERS + 1
    assert not {Component.WATCHER.slot, Component.SERVER.slot} & set(slots)
    state = SharedState.create(multiprocessing.get_context("fork"), active=comps)
    for comp in comps:                   # every reserved slot is addressable
        state.register(comp, 1000 + comp.slot)
        assert state.component(comp).pid == 1000 + comp.slot
    with pytest.raises(ValueError, match=f"at most {MAX_HANDLERS}"):
        controller_components([f"h{i}" for i in range(MAX_HANDLERS + 1)])


@pytest.mark.parametrize("elect", [False, True])
def test_the_process_hands_its_handler_the_fence_and_the_announcer(
        elect: bool) -> None:
    """The handler process is where the write fence and the create
    announcer are built, and its handler gets them in its context:
    without leader election an open fence and the master's shared memory;
    leading, a fence over its lease and the creates Lease."""
    from kuryr_supervisor.controller.leadership.announcer import (
        CreateLease,
        LocalCreates,
    )
    from tests.fixtures.fakeapi import FakeAPI
    api = FakeAPI().start()
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override("heartbeat_interval", 0.1, "supervisor")
    conf.set_override("handlers", ["a"], "controller")
    conf.set_override("api_root", api.url, "kubernetes")
    conf.set_override("leader_election", elect, "controller")
    made: list[Beating] = []

    def load(names: list[str]) -> list[tuple[str, Callable[[Runtime], Beating]]]:
        def make(rt: Runtime) -> Beating:
            made.append(Beating(rt))
            return made[-1]
        return [(names[0], make)]

    class Worker(HandlerWorker):
        loader = staticmethod(load)

    state = SharedState.create(multiprocessing.get_context("fork"),
                               active=controller_components(["a"]))
    worker = Worker(0, state, conf, os.getppid())  # type: ignore[arg-type]
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        end = time.monotonic() + 10
        while not made:
            assert time.monotonic() < end, "no handler made"
            time.sleep(0.02)
        ctx = made[0].ctx
        if elect:
            assert ctx.fence.closes and ctx.fence.allows()    # it leads
            assert isinstance(ctx.announcer, CreateLease)
        else:
            assert not ctx.fence.closes
            assert isinstance(ctx.announcer, LocalCreates)
    finally:
        worker.stopping.set()
        thread.join(5)
        api.stop()
