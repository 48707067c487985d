"""Bad configuration and a second daemon are refused before any fork.

Each case starts the real daemon (a subprocess) and expects it to exit at
once with one line on stderr naming the option: 78 for a configuration the
world disagrees with, and for a probe port or socket another process holds
(named: its pid and uid); 77 only when another daemon already holds the
state directory's lock. Before these checks each case started the
workers, which then failed and were restarted without end.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import unprivileged
from tests.fixtures.daemon import Daemon, free_port, run_once

pytestmark = pytest.mark.privileged

CONFIG, ALREADY_RUNNING = 78, 77


def start(workdir: Path, options: dict[str, dict[str, Any]]
          ) -> tuple[int, str, Daemon]:
    return run_once(workdir, options, timeout=20)


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "LocationInfo" not in lines[0] and "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize("case", ["probe-host", "state-file", "relative-unix",
                                  "foreign-dir", "open-dir", "bad-port"])
def test_bad_configuration_exits_78_naming_the_option(tmp_path: Path,
                                                      case: str) -> None:
    options: dict[str, dict[str, Any]] = {}
    named = ""
    if case == "probe-host":
        options = {"cni_health_server": {"host": "no-such-host.invalid"}}
        named = "[cni_health_server] host"
    elif case == "state-file":
        (tmp_path / "file").write_text("not a directory\n")
        options = {"ipam": {"state_dir": str(tmp_path / "file")}}
        named = "[ipam] state_dir"
    elif case == "relative-unix":
        options = {"cni_daemon": {"bind_address": "unix://run/k.sock"}}
        named = "[cni_daemon] bind_address"
    elif case in ("foreign-dir", "open-dir"):
        sock_dir = tmp_path / "run"
        sock_dir.mkdir()
        if case == "foreign-dir":
            os.chown(sock_dir, 65534, 65534)
        else:
            sock_dir.chmod(0o777)
        options = {"cni_daemon": {"bind_address": f"unix://{sock_dir}/c.sock"}}
        named = f"[cni_daemon] bind_address unix://{sock_dir}/c.sock: {sock_dir}"
    elif case == "bad-port":
        options = {"cni_health_server": {"port": 99999}}
        named = "[cni_health_server] port"
    status, stderr, _ = start(tmp_path / "d", options)
    assert status == CONFIG, stderr
    assert named in one_line(stderr)


def test_a_foreign_ancestor_is_refused_too(tmp_path: Path) -> None:
    parent = tmp_path / "shared"
    (parent / "run").mkdir(parents=True)
    os.chown(parent, 65534, 65534)
    status, stderr, _ = start(tmp_path / "d", {
        "cni_daemon": {"bind_address": f"unix://{parent}/run/c.sock"}})
    assert status == CONFIG
    assert f"{parent} is owned by uid 65534" in one_line(stderr)


@pytest.mark.parametrize("shared", ["state_dir", "port", "socket"])
def test_second_daemon_is_refused(tmp_path: Path, shared: str) -> None:
    """77 "already running" for the state directory (our own lock); a port
    or socket of another daemon (another state directory) is a conflict
    named by its holder's pid: 78."""
    first = Daemon(_mkdir(tmp_path / "first"))
    try:
        first.start()
        first.wait_ready()
        options: dict[str, dict[str, Any]] = {
            "state_dir": {"ipam": {"state_dir": first.options["ipam"]["state_dir"]}},
            "port": {"cni_health_server": {"port": first.port}},
            "socket": {"cni_daemon": {
                "bind_address": f"unix://{first.socket_path}"}},
        }[shared]
        status, stderr, _ = start(tmp_path / "second", options)
        line = one_line(stderr)
        if shared == "state_dir":
            assert status == ALREADY_RUNNING, stderr
            assert "already running" in line
        else:
            assert status == CONFIG, stderr
            assert "already running" not in line
            assert re.search(rf"held by pids? {first.pid}\b", line), line
            assert "uid 0" in line, line
        # the first one is untouched and still serves
        assert first.probe("/ready") == 200
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(first.socket_path))
    finally:
        first.close()


def test_a_probe_port_squatted_by_a_local_user_names_it(
        tmp_path: Path) -> None:
    """uid 65534 binds the probe port first: one line naming its pid and
    uid, exit 78 -- not 77 "already running" blaming a daemon that does
    not exist."""
    port = free_port()
    squatter = subprocess.Popen(
        [*unprivileged.setpriv(65534, 65534), sys.executable, "-c",
         "import socket, sys, time\n"
         "s = socket.socket()\n"
         f"s.bind(('127.0.0.1', {port}))\n"
         "s.listen()\n"
         "print('bound', flush=True)\n"
         "time.sleep(120)\n"], stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        assert squatter.stdout is not None
        assert squatter.stdout.readline().strip() == "bound"
        status, stderr, _ = start(tmp_path / "d", {
            "cni_health_server": {"port": port}})
        line = one_line(stderr)
        assert status == CONFIG, stderr
        assert f"127.0.0.1:{port}" in line and "already running" not in line
        assert f"pid {squatter.pid} " in line and "uid 65534" in line, line
    finally:
        squatter.kill()
        squatter.wait(10)


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def test_listen_fds_beyond_the_descriptor_limit_exits_78(
        tmp_path: Path) -> None:
    """LISTEN_FDS=999999999 for this very process (LISTEN_PID: the shell
    that execs the daemon keeps its pid): one line, 78, at once -- not
    hours walking every descriptor number."""
    workdir = _mkdir(tmp_path / "d")
    daemon = Daemon(workdir)
    command = " ".join(daemon.command())
    try:
        done = subprocess.run(
            ["sh", "-c", f"LISTEN_PID=$$ LISTEN_FDS=999999999 exec {command}"],
            capture_output=True, text=True, timeout=20)
    finally:
        daemon.close()
    line = one_line(done.stderr)
    assert done.returncode == CONFIG, done.stderr
    assert "LISTEN_FDS=999999999" in line and "RLIMIT_NOFILE" in line
