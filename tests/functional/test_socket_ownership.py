"""The master owns the listening sockets: a killed Server's successor answers
what waited in the backlog, and a socket passed by systemd
(``systemd-socket-activate``, the same protocol as a ``.socket`` unit) is
served as is -- real daemons, real signals, real systemd tooling."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon, free_port, wait_until

pytestmark = pytest.mark.privileged

REQUEST = b"GET /version HTTP/1.0\r\nHost: localhost\r\n\r\n"


def connect(where: Path | tuple[str, int], timeout: float) -> socket.socket:
    """A connection to the CNI API: a Unix path, or Kuryr's TCP host:port."""
    family = socket.AF_INET if isinstance(where, tuple) else socket.AF_UNIX
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(where if isinstance(where, tuple) else str(where))
    return sock


def ask(where: Path | tuple[str, int], timeout: float = 30.0) -> bytes:
    """One request on a new connection to the CNI API; the raw answer."""
    with connect(where, timeout) as sock:
        sock.sendall(REQUEST)
        return read_all(sock)


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def stopped(pid: int) -> bool:
    """Every thread of ``pid`` is in state T: SIGSTOP is delivered
    asynchronously, and a thread still running could accept one more."""
    states = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            states.add(f.read().rsplit(")", 1)[1].split()[0])
    return states == {"T"}


def answered(raw: bytes) -> bool:
    return raw.startswith(b"HTTP/1.0 200") and b"supportedVersions" in raw


@pytest.mark.parametrize("form", ["unix", "tcp"])
def test_killed_server_leaves_its_backlog_to_the_next(tmp_path: Path,
                                                      form: str) -> None:
    options: dict[str, dict[str, object]] = {}
    where: Path | tuple[str, int] = tmp_path / "run" / "cni.sock"
    if form == "tcp":                        # Kuryr's bind_address form
        port = free_port()
        where = ("127.0.0.1", port)
        options = {"cni_daemon": {"bind_address": f"127.0.0.1:{port}"}}
    d = Daemon(tmp_path, options).start()
    try:
        d.wait_ready()
        first = d.worker_pids()["server"]
        os.kill(first, signal.SIGSTOP)           # accepts nothing from now
        wait_until(lambda: stopped(first), 10)
        with connect(where, 30) as waiting:      # queued in the backlog
            waiting.sendall(REQUEST)
            os.kill(first, signal.SIGKILL)
            raw = read_all(waiting)
        assert answered(raw), raw[:300]
        second = wait_until(lambda: d.worker_pids()["server"] != first
                            and d.worker_pids()["server"], 10)
        assert second != first
        assert "restart #1" in d.log()
        # And while no Server runs at all: a new connection waits, never
        # ECONNREFUSED.
        os.kill(second, signal.SIGKILL)
        assert answered(ask(where))
    finally:
        d.close()


def activate(d: Daemon, *, probes: bool = False,
             metrics: bool = False) -> None:
    """Start the daemon under ``systemd-socket-activate``: it binds the CNI
    path (and the probe port), names them ``cni`` (``probes``) and execs
    the daemon on the first connection."""
    d.socket_path.parent.mkdir(mode=0o700)
    listen = ["-l", str(d.socket_path)]
    names = "cni"
    if probes:
        listen += ["-l", f"127.0.0.1:{d.port}"]
        names += ":probes"
    if metrics:             # kuryr-supervisor-metrics.socket
        listen += ["-l", f"127.0.0.1:{d.metrics_port}"]
        names += ":metrics"
    log = open(d.log_path, "ab")
    d.proc = subprocess.Popen(
        ["systemd-socket-activate", *listen, f"--fdname={names}",
         sys.executable, "-m", "kuryr_supervisor.daemon",
         "--config-file", str(d.config)],
        stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    log.close()
    wait_until(d.socket_path.exists, 10)


needs_activate = pytest.mark.skipif(
    shutil.which("systemd-socket-activate") is None,
    reason="needs systemd-socket-activate (Debian: systemd)")


@needs_activate
def test_socket_activation_serves_the_passed_socket(tmp_path: Path) -> None:
    d = Daemon(tmp_path)
    try:
        activate(d, probes=True)
        os.chmod(d.socket_path, 0o600)        # SocketMode=0600 in the unit
        st = os.stat(d.socket_path)
        # The first connection starts the daemon, and waits for its answer.
        assert answered(ask(d.socket_path, timeout=60)), d.log()
        d.wait_ready()
        assert f"cni socket {d.socket_path} taken from systemd" in d.log()
        assert f"probes socket ('127.0.0.1', {d.port}) taken from systemd" \
            in d.log()
        after = os.stat(d.socket_path)
        assert (after.st_dev, after.st_ino) == (st.st_dev, st.st_ino)
        # The Server's successor serves the same passed socket.
        os.kill(d.worker_pids()["server"], signal.SIGKILL)
        assert answered(ask(d.socket_path))
        d.signal(signal.SIGTERM)
        assert d.wait_exit(30) == 0, d.log()
        assert d.socket_path.exists()      # systemd's, never unlinked by us
    finally:
        d.close()


@needs_activate
def test_all_three_listeners_taken_from_systemd(tmp_path: Path) -> None:
    """As the three socket units pass them (named cni, probes, metrics):
    the daemon binds none itself, so no other process could hold one."""
    d = Daemon(tmp_path)
    try:
        activate(d, probes=True, metrics=True)
        os.chmod(d.socket_path, 0o600)
        assert answered(ask(d.socket_path, timeout=60)), d.log()
        d.wait_ready()
        for role, where in (("cni", str(d.socket_path)),
                            ("probes", f"('127.0.0.1', {d.port})"),
                            ("metrics", f"('127.0.0.1', {d.metrics_port})")):
            assert f"{role} socket {where} taken from systemd" in d.log()
        code, body = d.get("/metrics")
        assert code == 200
        with socket.create_connection(("127.0.0.1", d.metrics_port), 5) as m:
            m.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            assert read_all(m).startswith(b"HTTP/1.0 200")
        d.signal(signal.SIGTERM)
        assert d.wait_exit(30) == 0, d.log()
    finally:
        d.close()


@needs_activate
def test_a_passed_socket_others_can_reach_is_refused(tmp_path: Path) -> None:
    """systemd-socket-activate leaves the file 0644: any local user could
    then send pod requests. The daemon refuses it with one line, exit 78."""
    d = Daemon(tmp_path)
    try:
        activate(d)
        assert stat.S_IMODE(os.stat(d.socket_path).st_mode) & 0o077
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as trigger:
            trigger.connect(str(d.socket_path))
            assert d.wait_exit(60) == 78, d.log()
        lines = [line for line in d.log().splitlines() if line.strip()]
        assert "SocketMode=0600" in lines[-1] and str(d.socket_path) \
            in lines[-1], d.log()
    finally:
        d.close()
