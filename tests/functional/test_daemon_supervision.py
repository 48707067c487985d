"""The whole daemon as a real process: start, worker deaths, hangs, budgets,
signals, memory limits and the systemd protocol."""
from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon, session_pids, wait_until

pytestmark = pytest.mark.privileged

WORKERS = ("watcher", "server", "health")
Factory = Callable[..., Daemon]


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[Factory]:
    made: list[Daemon] = []

    def make(options: dict[str, dict[str, Any]] | None = None,
             env: dict[str, str] | None = None, start: bool = True) -> Daemon:
        workdir = tmp_path / f"d{len(made)}"
        workdir.mkdir()
        daemon = Daemon(workdir, options, env)
        made.append(daemon)
        return daemon.start() if start else daemon

    yield make
    for daemon in made:
        daemon.close()


def alive_again(d: Daemon, name: str, old_pid: int) -> bool:
    try:
        return d.worker_pids()[name] not in (old_pid, 0) and d.probe("/alive") == 200
    except (OSError, AssertionError, KeyError):
        return False


def test_start_all_probes_green(make_daemon: Factory) -> None:
    d = make_daemon()
    d.wait_ready()
    for path in ("/startup", "/ready", "/alive"):
        assert d.get(path)[0] == 200, path
    status = d.status()
    assert status["live"] and status["ready"]
    assert set(status["components"]) == set(WORKERS)
    pids = d.worker_pids()
    assert len(set(pids.values())) == 3 and d.pid not in pids.values()
    assert set(pids.values()) <= session_pids(d.pid)


def test_kill_each_worker_is_restarted_and_counted(make_daemon: Factory) -> None:
    d = make_daemon()
    d.wait_ready()
    for name in WORKERS:
        old = d.worker_pids()[name]
        os.kill(old, signal.SIGKILL)
        wait_until(functools.partial(alive_again, d, name, old), 10)
        comp = d.status()["components"][name]
        assert comp["restarts"] == 1, comp
    assert d.proc is not None and d.proc.poll() is None


def test_stopped_worker_is_named_dumped_and_restarted(make_daemon: Factory) -> None:
    d = make_daemon()
    d.wait_ready()
    old = d.worker_pids()["server"]
    os.kill(old, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        code, body = wait_until(
            lambda: (lambda r: r if r[0] != 200 else None)(d.get("/alive")), 10)
        named_after = time.monotonic() - stopped_at
        assert code == 503 and "server" in body, body
        assert named_after < 2.0 + 1.5  # server_deadline + a couple of cycles
        wait_until(lambda: alive_again(d, "server", old), 10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(old, signal.SIGKILL)
    comp = d.status()["components"]["server"]
    assert comp["restarts"] == 1
    log = d.log()
    assert "server stale" in log
    assert "Thread 0x" in log, "no Python stacks dumped before the kill"


def test_restart_budget_under_exit_policy(make_daemon: Factory) -> None:
    d = make_daemon({"supervisor": {"worker_death_policy": "exit",
                                    "max_restarts": 1}})
    d.wait_ready()
    old = d.worker_pids()["watcher"]
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: alive_again(d, "watcher", old), 10)
    os.kill(d.worker_pids()["server"], signal.SIGKILL)
    assert d.wait_exit(15) == 70
    wait_until(lambda: not session_pids(d.pid), 2.0)


def test_kuryr_compatible_exit_on_first_death(make_daemon: Factory) -> None:
    d = make_daemon({"supervisor": {"worker_death_policy": "exit",
                                    "max_restarts": 0}})
    d.wait_ready()
    os.kill(d.worker_pids()["health"], signal.SIGKILL)
    assert d.wait_exit(15) == 70
    wait_until(lambda: not session_pids(d.pid), 2.0)


def test_master_killed_leaves_no_orphan(make_daemon: Factory) -> None:
    d = make_daemon()
    d.wait_ready()
    workers = set(d.worker_pids().values())
    d.signal(signal.SIGKILL)
    start = time.monotonic()
    wait_until(lambda: not (session_pids(d.pid) & workers), 2.0)
    assert time.monotonic() - start < 2.0


def test_master_killed_frozen_workers_leave_too(make_daemon: Factory) -> None:
    """Leaving with the master must not depend on the worker's loop: here
    every worker is SIGSTOPped (its loop cannot notice anything) when the
    master is SIGKILLed; each must still be gone within a second."""
    d = make_daemon()
    d.wait_ready()
    workers = set(d.worker_pids().values())
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)
    d.signal(signal.SIGKILL)
    start = time.monotonic()
    try:
        wait_until(lambda: not (session_pids(d.pid) & workers), 3.0)
    finally:
        for pid in session_pids(d.pid) & workers:     # old code: rescue them
            os.kill(pid, signal.SIGKILL)
    assert time.monotonic() - start < 1.0


def test_memory_limit_fails_liveness_until_reloaded(make_daemon: Factory) -> None:
    d = make_daemon({"cni_health_server": {"max_memory_usage": 1}})
    wait_until(lambda: d.probe("/status") == 200, 20)
    code, body = wait_until(
        lambda: (lambda r: r if r[0] == 503 else None)(d.get("/alive")), 10)
    assert "memory" in body, body
    pids = d.worker_pids()
    d.options["cni_health_server"]["max_memory_usage"] = 100000
    d.write_config()
    d.signal(signal.SIGHUP)
    wait_until(lambda: d.probe("/alive") == 200, 10)
    assert d.worker_pids() == pids, "SIGHUP must not restart workers"


def test_bad_reload_keeps_running_values(make_daemon: Factory) -> None:
    d = make_daemon()
    d.wait_ready()
    pids = d.worker_pids()
    d.options["supervisor"]["max_restarts"] = "lots"
    d.write_config()
    d.signal(signal.SIGHUP)
    wait_until(lambda: "reload refused" in d.log(), 5)
    time.sleep(0.5)
    assert d.probe("/alive") == 200 and d.worker_pids() == pids


def test_sigterm_drains_and_exits_zero(make_daemon: Factory) -> None:
    d = make_daemon({"supervisor": {"graceful_shutdown_timeout": 8}})
    d.wait_ready()
    d.signal(signal.SIGTERM)
    start = time.monotonic()
    wait_until(lambda: d.probe("/ready") != 200, 1.0)
    assert d.wait_exit(8) == 0
    assert time.monotonic() - start < 8
    assert not session_pids(d.pid)


def test_sigint_drains_as_sigterm(make_daemon: Factory) -> None:
    """Ctrl-C is a graceful stop (tests/functional/test_stop.py: the store,
    a second Ctrl-C)."""
    d = make_daemon({"supervisor": {"graceful_shutdown_timeout": 8}})
    d.wait_ready()
    d.signal(signal.SIGINT)
    assert d.wait_exit(8) == 0
    wait_until(lambda: not session_pids(d.pid), 2.0)


def test_systemd_notify_protocol(make_daemon: Factory, tmp_path: Path) -> None:
    path = str(tmp_path / "notify.sock")
    sd = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sd.bind(path)
    sd.settimeout(20)
    env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="1000000")
    try:
        d = make_daemon(env=env)
        first = sd.recv(4096).decode()
        ready_probe = d.probe("/ready")
        while "READY=1" not in first:   # watchdog pings may precede READY,
            # and start-timeout extensions while alive but not ready yet
            assert first == "WATCHDOG=1" or \
                first.startswith("EXTEND_TIMEOUT_USEC="), first
            first = sd.recv(4096).decode()
            ready_probe = d.probe("/ready")
        assert ready_probe == 200, "READY=1 sent before the daemon was ready"
        pings, deadline = 0, time.monotonic() + 2.5
        sd.settimeout(0.5)
        while time.monotonic() < deadline:
            with contextlib.suppress(socket.timeout):
                pings += sd.recv(4096).decode() == "WATCHDOG=1"
        assert pings >= 3
        d.signal(signal.SIGTERM)
        sd.settimeout(5)
        messages: list[str] = []
        with contextlib.suppress(socket.timeout):
            while not any("STOPPING=1" in m for m in messages):
                messages.append(sd.recv(4096).decode())
        assert any("STOPPING=1" in m for m in messages), messages
        assert d.wait_exit(10) == 0
    finally:
        sd.close()


def test_invalid_configuration_refused(tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("[supervisor]\nmax_restarts = many\n")
    proc = subprocess.run(
        [sys.executable, "-m", "kuryr_supervisor.daemon", "--config-file", str(conf)],
        capture_output=True, text=True, timeout=30)
    assert proc.returncode == 78
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "[supervisor] max_restarts" in lines[0], proc.stderr
