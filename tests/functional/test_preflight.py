"""Bad configuration and a second daemon are refused before any fork.

Each case starts the real daemon (a subprocess) and expects it to exit at
once with one line on stderr naming the option: 78 for a configuration the
world disagrees with, 77 when another daemon already holds the state
directory, probe port or socket. Before these checks each case started the
workers, which then failed and were restarted without end.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon, run_once

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
def test_second_daemon_refuses_with_77(tmp_path: Path, shared: str) -> None:
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
        assert status == ALREADY_RUNNING, stderr
        line = one_line(stderr)
        assert "already running" in line
        # the first one is untouched and still serves
        assert first.probe("/ready") == 200
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(first.socket_path))
    finally:
        first.close()


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path
