"""``kuryr-supervisor status`` against whatever answers on the probe port
(any local user may bind it while the daemon is down): a real process
against real servers on loopback. It never prints a forged "ready" with
exit 0, never passes terminal control sequences through, answers within a
few seconds however slowly the bytes come, bounds what it reads, and never
shows a traceback."""
from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kuryr_supervisor.cli import status as status_mod

Answer = Callable[[socket.socket], None]


def valid_doc(**over: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "version": "0.1.0", "live": True, "ready": True, "summary": "live, ready",
        "cause": "none", "components": {"server": {"state": "running"}},
        "checks": {"netlink": {"state": "ok", "kind": "liveness"}},
        "budgets": {}, "server": {"inflight": 0, "capacity": 64}}
    doc.update(over)
    return doc


def http(body: bytes, status: str = "200 OK") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode() + body


class Server:
    """A TCP server on loopback answering every connection with ``answer``."""

    def __init__(self, answer: Answer) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.answer = answer
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.stop.is_set():
                conn.close()
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(30)
            try:
                conn.recv(65536)
                self.answer(conn)
            except OSError:
                pass

    def close(self) -> None:
        """Wake the accept (shutdown) and wait for its thread before the
        descriptor is closed: a thread still calling accept on a closed
        descriptor's number would accept the connections of whatever
        socket gets that number next (seen: a fake Keystone's, answered
        with a status document, tests later)."""
        self.stop.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[Answer], Path]]:
    servers: list[Server] = []

    def start(answer: Answer) -> Path:
        server = Server(answer)
        servers.append(server)
        conf = tmp_path / f"k{server.port}.conf"
        conf.write_text(f"[cni_health_server]\nhost = 127.0.0.1\n"
                        f"port = {server.port}\n[cni_install]\n"
                        f"bin_dir = {tmp_path}\n")
        return conf

    yield start
    for server in servers:
        server.close()
        assert not server.thread.is_alive(), "an accept outlived its server"


def status(conf: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str],
                                             float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "kuryr_supervisor.daemon", "status",
         "--config-file", str(conf), *extra],
        capture_output=True, text=True, timeout=60, check=False)
    return done, time.monotonic() - started


def refused(done: subprocess.CompletedProcess[str], why: str) -> None:
    assert done.returncode == 2, done
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert why in done.stderr, done.stderr


@pytest.mark.parametrize("body", [
    b'{"live": true, "ready": true}',                 # forged, too thin
    json.dumps({**valid_doc(), "components": {"x": "ready"}}).encode(),
    b"[1, 2, 3]", b"ready", b"{" * 100000,
    json.dumps({**valid_doc(), "components": {"server": {
        "state": "running", "restarts": {"a": 1}, "memory": "x"}}}).encode()])
def test_an_answer_not_from_kuryr_supervisor(serve: Callable[[Answer], Path],
                                             body: bytes) -> None:
    conf = serve(lambda conn: conn.sendall(http(body)))
    done, _ = status(conf)
    refused(done, "is not a kuryr-supervisor probe listener")
    if b"restarts" not in body:     # valid shape, wrong types: --json shows it
        done, _ = status(conf, "--json")
        refused(done, "is not a kuryr-supervisor probe listener")


def test_not_http_or_not_200(serve: Callable[[Answer], Path]) -> None:
    done, _ = status(serve(lambda conn: conn.sendall(b"SSH-2.0-OpenSSH\r\n")))
    refused(done, "not reachable")
    done, _ = status(serve(lambda conn: conn.sendall(
        http(json.dumps(valid_doc()).encode(), "404 Not Found"))))
    refused(done, "HTTP 404")


def test_control_characters_never_reach_the_terminal(
        serve: Callable[[Answer], Path]) -> None:
    evil = "\x1b]0;owned\x07\x1b[2J\r\x9b31m"
    doc = valid_doc(summary=f"live {evil}", ready=False, version=evil,
                    checks={f"k8s{evil}": {"state": "failed", "kind": "x",
                                           "message": evil}})
    conf = serve(lambda conn: conn.sendall(http(json.dumps(doc).encode())))
    done, _ = status(conf)
    assert done.returncode == 1, done              # live, not ready
    for char in ("\x1b", "\x07", "\r", "\x9b"):
        assert char not in done.stdout + done.stderr
    assert "owned" in done.stdout and "?]0;owned?" in done.stdout
    raw, _ = status(conf, "--json")
    assert raw.returncode == 1 and "\x1b" not in raw.stdout
    assert json.loads(raw.stdout)["summary"] == f"live {evil}"


def test_a_slow_drip_is_cut_off(serve: Callable[[Answer], Path]) -> None:
    def drip(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        for _ in range(120):
            conn.sendall(b" ")
            time.sleep(0.25)

    done, took = status(serve(drip))
    refused(done, f"no complete answer within {status_mod.TIMEOUT:g}s")
    assert took < status_mod.TIMEOUT + 5, took


def test_a_huge_answer_is_bounded(serve: Callable[[Answer], Path]) -> None:
    size = status_mod.MAX_BYTES * 2

    def flood(conn: socket.socket) -> None:
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n"
                     .encode())
        chunk = b"9" * 65536
        for _ in range(size // len(chunk)):
            conn.sendall(chunk)

    done, _ = status(serve(flood))
    refused(done, "larger than")


def test_a_real_shape_passes(serve: Callable[[Answer], Path]) -> None:
    conf = serve(lambda conn: conn.sendall(http(json.dumps(valid_doc())
                                                .encode())))
    done, _ = status(conf)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "kuryr-supervisor 0.1.0: ready"
