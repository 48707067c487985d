"""The HealthManager worker's pieces in-process, over real HTTP on loopback."""
from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort
from kuryr_supervisor.health.httpserver import listen
from kuryr_supervisor.state import Component, Reason, SharedState
from kuryr_supervisor.workers.health import HealthManagerWorker


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def state() -> SharedState:
    state = SharedState.create(multiprocessing.get_context("fork"))
    for comp in (Component.WATCHER, Component.SERVER):
        state.register(comp, os.getpid())
        state.set_ready(comp, True)
    return state


@pytest.fixture
def conf() -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([])
    conf.set_override("port", 0, group="cni_health_server")
    conf.set_override("port", 0, group="metrics")      # off unless a test asks
    return conf


@pytest.fixture
def probe() -> Iterator[socket.socket]:
    """The probe listener, bound outside the worker as the master does."""
    with listen("127.0.0.1", 0) as sock:
        yield sock


@pytest.fixture
def worker(state: SharedState, conf: cfg.ConfigOpts, probe: socket.socket
           ) -> Iterator[HealthManagerWorker]:
    # master_pid is our parent, so beat() sees its master alive.
    w = HealthManagerWorker(0, state, conf, os.getppid(), probe_listener=probe)
    yield w
    w.close()


def unanswered(port: int) -> bool:
    """Nothing answers on ``port`` within a moment (refused, or waiting in
    the backlog of a listener nobody serves)."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=0.5)
        conn.request("GET", "/alive")
        conn.getresponse()
    except OSError:
        return True
    return False


def get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


@pytest.mark.privileged        # the netlink check needs NET_ADMIN
def test_serves_real_http(worker: HealthManagerWorker,
                          state: SharedState) -> None:
    server = worker.start()
    assert state.component(Component.HEALTH).ready
    assert get(server.port, "/alive") == (200, "ok\n")
    assert get(server.port, "/ready") == (200, "ok\n")
    assert get(server.port, "/startup") == (200, "ok\n")
    code, body = get(server.port, "/status")
    assert code == 200
    assert json.loads(body)["checks"]["netlink"]["state"] in ("ok", "failed")
    state.mark_down(Component.SERVER, Reason.KILLED, -9)
    assert get(server.port, "/alive") == (200, "ok\n")    # being restarted
    code, body = get(server.port, "/ready?verbose")
    assert code == 503
    assert "server not running: killed by SIGKILL" in body
    state.mark_down(Component.SERVER, Reason.STALE, -9)     # a missed deadline
    code, body = get(server.port, "/alive")
    assert code == 503
    assert "server dead: killed after missing its heartbeat deadline" in body
    listener = server.socket
    assert listener.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)


def test_next_manager_answers_from_the_same_socket(
        state: SharedState, conf: cfg.ConfigOpts, probe: socket.socket) -> None:
    """A probe sent while no HealthManager serves waits in the backlog of
    the (master's) listener and is answered by the next one."""
    first = HealthManagerWorker(0, state, conf, os.getppid(),
                                probe_listener=probe)
    port = first.start().port
    for _ in range(5):
        assert get(port, "/alive")[0] == 200
    first.close()
    waiting = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    waiting.request("GET", "/alive")          # connected: in the backlog
    second = HealthManagerWorker(0, state, conf, os.getppid(),
                                 probe_listener=probe)
    try:
        assert second.start().port == port
        response = waiting.getresponse()
        assert (response.status, response.read()) == (200, b"ok\n")
        assert get(port, "/alive")[0] == 200
    finally:
        waiting.close()
        second.close()


def test_step_beats_often_and_checks_on_interval(
        state: SharedState, conf: cfg.ConfigOpts, probe: socket.socket) -> None:
    clock = Clock(100.0)
    conf.set_override("check_interval", 5.0, group="health")
    conf.set_override("heartbeat_interval", 0.5, group="supervisor")
    w = HealthManagerWorker(0, state, conf, os.getppid(), clock=clock,
                            probe_listener=probe)
    try:
        w.start()
        assert w.monitor is not None
        due = w.step(0.0)
        assert due == 105.0
        taken = w.monitor.snapshot.taken_at  # type: ignore[union-attr]
        assert w.pause(due) == 0.5           # beat before the next check
        beats = state.component(Component.HEALTH).heartbeat
        clock.t += 0.5
        time.sleep(0.01)
        assert w.step(due) == due            # not due: no check run ...
        assert w.monitor.snapshot.taken_at == taken  # type: ignore[union-attr]
        assert state.component(Component.HEALTH).heartbeat > beats  # ... beat
        clock.t = 104.9
        assert w.pause(due) == pytest.approx(0.1)
        conf.set_override("check_interval", 1.0, group="health")  # SIGHUP
        clock.t = 105.0
        assert w.step(due) == 106.0
        assert w.monitor.snapshot.taken_at > taken  # type: ignore[union-attr]
    finally:
        w.close()


def test_woken_step_republishes_without_io(
        state: SharedState, conf: cfg.ConfigOpts, probe: socket.socket) -> None:
    clock = Clock(100.0)
    w = HealthManagerWorker(0, state, conf, os.getppid(), clock=clock,
                            probe_listener=probe)
    try:
        w.start()
        assert w.monitor is not None
        due = w.step(0.0)
        taken = w.monitor.snapshot.taken_at  # type: ignore[union-attr]
        assert state.overall().live
        state.mark_down(Component.SERVER, Reason.STALE, -9)
        assert not w.monitor.evaluate().verdict.live   # a request sees it
        assert w._wake.is_set()
        assert w.step(due, woken=True) == due
        assert not state.overall().live                # published at once
        assert w.monitor.snapshot.taken_at == taken  # type: ignore[union-attr]
    finally:
        w.close()


def test_drain_waits_for_the_server(worker: HealthManagerWorker,
                                    state: SharedState) -> None:
    port = worker.start().port
    stop_at = time.monotonic() + 0.4

    def server_exits() -> None:
        time.sleep(0.4)
        state.mark_down(Component.SERVER, Reason.STOPPING)
    threading.Thread(target=server_exits).start()
    state.set_draining()
    drainer = threading.Thread(target=worker.drain)
    drainer.start()
    time.sleep(0.1)
    code, body = get(port, "/ready")           # still answering while draining
    assert code == 503 and "draining" in body
    drainer.join(timeout=10)
    assert not drainer.is_alive()
    assert time.monotonic() >= stop_at
    assert unanswered(port)


def test_drain_gives_up_at_the_deadline(worker: HealthManagerWorker,
                                        conf: cfg.ConfigOpts) -> None:
    conf.set_override("graceful_shutdown_timeout", 2, group="supervisor")
    port = worker.start().port
    started = time.monotonic()
    worker.drain()                        # the Server never leaves
    assert 0.9 <= time.monotonic() - started < 3
    assert unanswered(port)


def test_serve_runs_until_closed(worker: HealthManagerWorker,
                                 state: SharedState) -> None:
    interval = sys.getswitchinterval()
    runner = threading.Thread(target=worker.serve)
    try:
        runner.start()
        deadline = time.monotonic() + 10
        while worker.server is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert worker.server is not None
        assert get(worker.server.port, "/alive")[0] == 200
        state.mark_down(Component.SERVER, Reason.STOPPING)
        worker.drain()
        runner.join(timeout=10)
        assert not runner.is_alive()
    finally:
        sys.setswitchinterval(interval)


class ApiCheck(Check):
    name = "k8s-api"
    kind = Kind.READINESS
    sort = Sort.IO

    def __init__(self, ok: bool) -> None:
        self.ok = ok

    def run(self, now: float) -> Result:
        return Result(self.ok, "API /readyz answered" if self.ok
                      else "k8s API unreachable: connection refused")


def test_extra_checks_are_served(state: SharedState, conf: cfg.ConfigOpts,
                                 probe: socket.socket) -> None:
    built: list[tuple[int, int]] = []

    def factory(st: SharedState, cf: cfg.ConfigOpts,
                master_pid: int) -> list[Check]:
        built.append((os.getpid(), master_pid))
        return [ApiCheck(False)]
    w = HealthManagerWorker(0, state, conf, os.getppid(),
                            check_factory=factory, probe_listener=probe)
    try:
        port = w.start().port
        # In the worker, with the master's pid for its clients' User-Agent.
        assert built == [(os.getpid(), os.getppid())]
        assert get(port, "/ready/k8s-api") == (
            503, "[-]k8s-api failed: k8s API unreachable: connection "
                 "refused\n")
        assert get(port, "/alive")[0] == 200   # never a liveness matter
    finally:
        w.close()
    other = HealthManagerWorker(0, state, conf, os.getppid(),
                                extra_checks=[ApiCheck(True)],
                                probe_listener=probe)
    try:
        assert get(other.start().port, "/ready/k8s-api") == (200, "ok\n")
    finally:
        other.close()


def test_metrics_listener_is_separate_from_the_probes(
        state: SharedState, conf: cfg.ConfigOpts, probe: socket.socket) -> None:
    """Exposing /metrics on its own address exposes nothing else; the
    probe listener keeps /metrics too (loopback, for compatibility)."""
    metrics = listen("127.0.0.1", 0)
    metrics_port = metrics.getsockname()[1]
    state.record_cni_request("ADD", 0, 0.02)
    worker = HealthManagerWorker(0, state, conf, os.getppid(),
                                 probe_listener=probe,
                                 metrics_listener=metrics)
    probe_port = worker.start().port
    try:
        assert worker.metrics_server is not None
        assert worker.metrics_server.port == metrics_port != probe_port
        code, body = get(metrics_port, "/metrics")
        assert code == 200
        assert 'kuryr_supervisor_cni_requests_total{code="0",command="ADD"} 1.0' \
            in body
        assert "kuryr_supervisor_ipam_pool_addresses" in body
        for path in ("/status", "/ready", "/alive", "/startup"):
            assert get(metrics_port, path)[0] == 404
            assert get(probe_port, path)[0] in (200, 503)
    finally:
        worker.close()
    assert unanswered(metrics_port)             # no longer served ...
    metrics.close()
    with pytest.raises(ConnectionRefusedError):  # ... closed by its owner
        get(metrics_port, "/metrics")


def test_without_a_metrics_listener_metrics_stay_on_the_probe_port(
        worker: HealthManagerWorker) -> None:
    port = worker.start().port
    assert worker.metrics_server is None
    assert get(port, "/alive")[0] == 200
    assert get(port, "/metrics")[0] == 200
