"""``kuryr-supervisor status`` and ``check-config`` as an operator runs them:
real processes, against a real daemon over real HTTP."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon, free_port, wait_until
from tests.fixtures.fakeapi import FakeAPI

pytestmark = pytest.mark.privileged


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kuryr_supervisor.daemon", *map(str, args)],
        capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path)
    try:
        d.start()
        d.wait_ready()
        yield d
    finally:
        d.close()


def test_status_of_a_ready_daemon(daemon: Daemon) -> None:
    pids = daemon.worker_pids()
    done = cli("status", "--config-file", daemon.config)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert out.splitlines()[0].endswith(": ready"), out
    for name, pid in pids.items():
        assert any(line.split()[:1] == [name] and f"pid {pid} " in line
                   for line in out.splitlines()), out
    assert "CNI failures   ok: 0 consecutive (limit 3)" in out
    assert "Checks:   all" in out and "passing" in out
    assert "Shim:" in out and "package carries the" in out

    raw = cli("status", "--json", "--config-file", daemon.config)
    assert raw.returncode == 0
    doc = json.loads(raw.stdout)
    assert doc["ready"] is True and set(doc["components"]) == set(pids)


def test_status_of_a_daemon_not_ready(tmp_path: Path) -> None:
    """Kubernetes mode with the API answering 500: live but not ready (1),
    and the failing check is named with its cause."""
    api = FakeAPI().start()
    api.fail(500)
    d = Daemon(tmp_path, {"kubernetes": {
        "api_root": api.url, "node_name": "node-st", "request_timeout": 1.0,
        "api_check_interval": 0.2, "api_check_timeout": 0.5}})
    try:
        d.start()
        wait_until(lambda: d.probe("/alive") == 200, 20)
        done = cli("status", "--config-file", d.config)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "NOT READY" in done.stdout.splitlines()[0]
        assert "Failing checks:" in done.stdout
        assert "[-] k8s-api (readiness" in done.stdout
        assert "500" in done.stdout
    finally:
        d.close()
        api.stop()


def test_status_unreachable(tmp_path: Path) -> None:
    conf = tmp_path / "k.conf"
    conf.write_text(f"[cni_health_server]\nhost = 127.0.0.1\nport = "
                    f"{free_port()}\n")
    done = cli("status", "--config-file", conf)
    assert done.returncode == 2
    assert done.stdout == ""
    assert "not reachable" in done.stderr and len(done.stderr.splitlines()) == 1
    assert cli("status", "--json", "--config-file", conf).returncode == 2


def test_check_config_beside_a_running_daemon(daemon: Daemon, tmp_path: Path
                                              ) -> None:
    """Same config as the running daemon: ok, no lock taken, no socket
    bound; the daemon keeps its workers and stays ready."""
    before = daemon.worker_pids()
    for args in (("check-config", "--config-file", daemon.config),
                 ("--config-file", daemon.config, "--check-config")):
        done = cli(*args)
        assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")
    assert daemon.probe("/ready") == 200
    assert daemon.worker_pids() == before
    assert daemon.proc is not None and daemon.proc.poll() is None
    lock = Path(daemon.options["ipam"]["state_dir"]) / "daemon.lock"
    assert lock.read_text().strip() == str(daemon.pid)


def test_check_config_refuses_a_typo(tmp_path: Path) -> None:
    d = Daemon(tmp_path)
    d.options["supervisor"]["max_restarts"] = "five"
    d.write_config()
    done = cli("check-config", "--config-file", d.config)
    assert done.returncode == 78 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert "[supervisor] max_restarts" in done.stderr


def test_check_config_runs_the_preflight_without_side_effects(
        tmp_path: Path) -> None:
    d = Daemon(tmp_path)
    state = Path(d.options["ipam"]["state_dir"])
    assert cli("check-config", "--config-file", d.config).returncode == 0
    assert not state.exists()                 # nothing created
    state.write_text("a file, not a directory")
    done = cli("check-config", "--config-file", d.config)
    assert done.returncode == 78 and done.stderr.count("\n") == 1
    assert "[ipam] state_dir" in done.stderr and "not a directory" in done.stderr
    # The daemon itself refuses the same file with the same line.
    started = d.start()
    assert started.wait_exit(30) == 78
    assert done.stderr.strip() in d.log()
    os.unlink(state)
