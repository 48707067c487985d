"""One process per handler: a real controller daemon running two handlers
(the built-in ``neutron_port`` and ``ticker``, a test handler installed
through its entry point) against the fakes; each handler is named in the
probes, and the supervisor acts on its process alone.

Fake only: claims about handler processes, which no cloud changes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.state import MAX_HANDLERS
from tests.fixtures.controller import Cloud, cloud_fixture, controller_daemon, plugin_env
from tests.fixtures.daemon import Daemon, wait_until

cloud = pytest.fixture(cloud_fixture)

PORT, TICKER = "handler:neutron_port", "handler:ticker"


def two_handlers(tmp_path: Path, cloud: Cloud,
                 options: dict[str, dict[str, Any]] | None = None,
                 **env: str) -> Daemon:
    opts: dict[str, dict[str, Any]] = {
        "controller": {"handlers": "neutron_port,ticker"}}
    for group, values in (options or {}).items():
        opts.setdefault(group, {}).update(values)
    return controller_daemon(tmp_path, cloud, opts, plugin_env(**env))


@pytest.fixture
def daemon(tmp_path: Path, cloud: Cloud) -> Iterator[Daemon]:
    d = two_handlers(tmp_path, cloud).start()
    yield d
    d.close()


def failing(d: Daemon, path: str) -> Callable[[], tuple[int, str] | None]:
    def probe() -> tuple[int, str] | None:
        answer = d.get(path)
        return answer if answer[0] != 200 else None
    return probe


def restarted(d: Daemon, name: str, old: int) -> bool:
    try:
        pids = d.worker_pids()
    except (OSError, AssertionError):
        return False
    return pids[name] not in (old, 0) and d.probe("/alive") == 200


def test_each_handler_runs_in_its_own_process(daemon: Daemon, cloud: Cloud) -> None:
    daemon.wait_ready()
    status = daemon.status()
    assert sorted(status["components"]) == ["handler:neutron_port",
                                            "handler:ticker", "health"]
    pids = daemon.worker_pids()
    assert len(set(pids.values())) == 3 and daemon.pid not in pids.values()
    _, body = daemon.get("/alive?verbose")
    assert f"[+]{PORT} ok" in body and f"[+]{TICKER} ok" in body, body
    assert daemon.get(f"/alive/{TICKER}")[0] == 200
    _, metrics = daemon.get("/metrics")
    assert f'kuryr_supervisor_worker_up{{component="{TICKER}"}} 1.0' in metrics
    # the built-in handler still does its work beside the other one
    cloud.api.add_pod("default", "web", "node-a")
    wait_until(lambda: cloud.podport("default", "web"), 10)


def test_killed_handler_alone_is_restarted_and_named(daemon: Daemon,
                                                     cloud: Cloud) -> None:
    daemon.wait_ready()
    port_pid = daemon.worker_pids()[PORT]
    old = daemon.worker_pids()[TICKER]
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: restarted(daemon, TICKER, old), 10)
    # The first restart in a window is immediate; the second waits out a
    # backoff (0.25 s), long enough to see /status name it while it is
    # down, and /alive stay 200 meanwhile: the supervisor heals it.
    old = daemon.worker_pids()[TICKER]
    os.kill(old, signal.SIGKILL)

    def named() -> str | None:
        assert daemon.probe("/alive") == 200
        message = str(daemon.status()["checks"][TICKER]["message"])
        return message if "killed by SIGKILL" in message else None
    message = wait_until(named, 5, interval=0.01)
    assert message.startswith(f"{TICKER} dead: killed by SIGKILL, "
                              "restarting (restart #"), message
    assert daemon.status()["checks"][PORT]["state"] == "ok"
    wait_until(lambda: restarted(daemon, TICKER, old), 10)
    status = daemon.status()["components"]
    assert status[TICKER]["restarts"] == 2
    assert status[PORT]["restarts"] == 0 and status[PORT]["pid"] == port_pid
    cloud.api.add_pod("default", "after", "node-a")
    wait_until(lambda: cloud.podport("default", "after"), 10)
    assert daemon.worker_pids()[PORT] == port_pid


def test_stopped_handler_is_named_stale_killed_and_restarted(daemon: Daemon) -> None:
    daemon.wait_ready()
    port_pid = daemon.worker_pids()[PORT]
    old = daemon.worker_pids()[TICKER]
    os.kill(old, signal.SIGSTOP)
    try:
        # Seen stale, or (on a loaded machine, a probe later) already killed
        # for it by the master: either way /alive names the missed heartbeat.
        code, body = wait_until(failing(daemon, "/alive?verbose"), 10,
                                interval=0.02)
        assert (f"[-]{TICKER} failed: {TICKER} stale: no heartbeat" in body
                or f"[-]{TICKER} failed: {TICKER} dead: killed after missing "
                   "its heartbeat deadline" in body), body
        assert f"[+]{PORT} ok" in body, body
        # the other handler keeps heartbeating while this one is stale
        for _ in range(3):
            port = daemon.status()["components"][PORT]
            assert port["state"] == "running", port
            assert port["heartbeatAge"] < port["deadline"], port
            time.sleep(0.2)
        wait_until(lambda: restarted(daemon, TICKER, old), 10)
    finally:
        try:
            os.kill(old, signal.SIGKILL)
        except ProcessLookupError:
            pass
    daemon.wait_ready(10)
    status = daemon.status()["components"]
    assert status[TICKER]["restarts"] == 1
    assert status[PORT]["restarts"] == 0 and status[PORT]["pid"] == port_pid
    log = daemon.log()
    assert f"{TICKER} stale" in log and "Thread 0x" in log, log


def test_failure_budget_is_per_handler_and_names_it(tmp_path: Path,
                                                     cloud: Cloud) -> None:
    """The ticker fails every step: its own budget runs out and liveness
    names it; the neutron_port handler's count stays its own (0). A budget
    is not a reason to restart a process (see test_controller for exit 76
    under the exit policy)."""
    d = two_handlers(tmp_path, cloud, {
        "controller": {"handler_failures_count": 20}},
        KURYR_TEST_TICKER_FAIL="1").start()
    try:
        wait_until(lambda: d.probe("/status") == 200, 20)
        code, body = wait_until(failing(d, "/alive?verbose"), 20)
        assert "[-]handler-failures failed: " in body, body
        assert "consecutive handler failures (limit 20): ticker " in body, body
        assert "neutron_port" not in body.split("[-]handler-failures")[1]\
            .split("\n")[0], body
        status = d.status()
        assert status["components"][TICKER]["failures"] >= 20
        assert status["components"][PORT]["failures"] == 0
        assert status["handlerFailures"] >= 20
        assert status["components"][TICKER]["restarts"] == 0
    finally:
        d.close()


def test_not_synced_names_the_handler(tmp_path: Path, cloud: Cloud) -> None:
    """Readiness is one check over every handler and names the ones behind:
    with the Kubernetes API down, neutron_port cannot list; the ticker is
    ready at once."""
    cloud.api.stop()
    d = two_handlers(tmp_path, cloud).start()
    try:
        wait_until(lambda: d.probe("/status") == 200, 20)
        wait_until(lambda: "ticker" not in d.get("/ready/handler-synced")[1], 20)
        code, body = d.get("/ready/handler-synced")
        assert code != 200 and "neutron_port has not caught up yet" in body, body
        assert d.probe("/alive") == 200
    finally:
        d.close()


def config_exit(tmp_path: Path, cloud: Cloud, handlers: str) -> tuple[int, str]:
    d = two_handlers(tmp_path, cloud, {"controller": {"handlers": handlers}})
    proc = subprocess.run(
        [sys.executable, "-m", "kuryr_supervisor.daemon", "--config-file",
         str(d.config)], capture_output=True, text=True, timeout=60,
        env=plugin_env())
    return proc.returncode, proc.stderr


def test_more_handlers_than_slots_exits_78(tmp_path: Path, cloud: Cloud) -> None:
    names = ",".join(f"h{i}" for i in range(MAX_HANDLERS + 1))
    code, err = config_exit(tmp_path / "many", cloud, names)
    assert code == 78 and err.count("\n") == 1, err
    assert f"[controller] handlers: {MAX_HANDLERS + 1} handlers, at most " \
        f"{MAX_HANDLERS}" in err
    code, err = config_exit(tmp_path / "twice", cloud, "ticker,ticker")
    assert code == 78 and "ticker named twice" in err and err.count("\n") == 1
    code, err = config_exit(tmp_path / "missing", cloud, "ticker,nope")
    assert code == 78 and err.count("\n") == 1, err
    assert "no entry point named nope" in err
    assert not (tmp_path / "many" / "state").exists(), \
        "nothing may start before the configuration is refused"
