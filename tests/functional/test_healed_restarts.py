"""Liveness reflects what the supervisor cannot heal, on a real daemon.

A series of Server SIGKILLs well inside the restart budget is healed by the
supervisor: ``/alive`` (polled at 20 Hz, as a busy kubelet would) never
fails, and the Node gets WorkerRestarted Events (one, aggregated) and
nothing else -- no NotLive/Live, no NotReady/Ready per kill. Once the
restart budget is exhausted, liveness fails and a NotLive Event says so.
Real daemon process, real signals, the Kubernetes-API-shaped fake over
real HTTP.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon, wait_until
from tests.fixtures.fakeapi import FakeAPI

pytestmark = pytest.mark.privileged

KILLS = 5
MAX_RESTARTS = 7
POLL_HZ = 20


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    server = FakeAPI().start()
    yield server
    server.stop()


class Poller:
    """``/alive`` at POLL_HZ on its own thread; every answer kept."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.codes: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(1 / POLL_HZ):
            try:
                code = self.daemon.get("/alive", timeout=1.0)[0]
            except OSError:
                code = 0
            self.codes.append(code)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def events(api: FakeAPI, reason: str | None = None) -> list[dict[str, Any]]:
    return [e for e in list(api.core_events.values())
            if reason is None or e["reason"] == reason]


def kill_server(d: Daemon) -> None:
    """SIGKILL the running Server once it is back (a new pid)."""
    pid = wait_until(lambda: d.worker_pids()["server"], 20)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: d.worker_pids()["server"] != pid, 20)


def test_healed_kills_keep_alive_and_write_only_worker_restarted(
        tmp_path: Path, api: FakeAPI) -> None:
    node = "node-heal"
    api.add_node(node)
    d = Daemon(tmp_path, {
        "kubernetes": {"api_root": api.url, "node_name": node,
                       "request_timeout": 1.0, "api_check_interval": 0.2,
                       "api_check_timeout": 0.5},
        "supervisor": {"max_restarts": MAX_RESTARTS, "restart_window": 300,
                       "restart_backoff_max": 1.0}})
    try:
        d.start()
        d.wait_ready()
        wait_until(lambda: events(api, "Ready"), 10)
        before = {name for name in api.core_events}
        with Poller(d) as poller:
            for _ in range(KILLS):
                kill_server(d)
                time.sleep(1.0)
            d.wait_ready()
            time.sleep(1.0)
        failures = [c for c in poller.codes if c != 200]
        assert len(poller.codes) > KILLS * POLL_HZ // 2, poller.codes
        assert failures == [], (f"/alive failed at {len(failures)} of "
                                f"{len(poller.codes)} polls\n{d.log()}")
        wait_until(lambda: sum(e.get("count", 1) for e in
                               events(api, "WorkerRestarted")) == KILLS, 20)
        time.sleep(1.0)                     # anything else would show now
        new = [e for name, e in list(api.core_events.items())
               if name not in before]
        assert [e["reason"] for e in new] == ["WorkerRestarted"], new
        assert new[0]["count"] == KILLS
        # Past the budget: not healed any more -- liveness fails, told.
        for _ in range(MAX_RESTARTS + 1 - KILLS):
            kill_server(d)
        wait_until(lambda: d.probe("/alive") == 503, 20)
        code, body = d.get("/alive?verbose")
        assert code == 503 and "[-]restart-budget" in body, body
        wait_until(lambda: events(api, "NotLive"), 20)
        assert events(api, "RestartBudgetExhausted")
    finally:
        d.close()
