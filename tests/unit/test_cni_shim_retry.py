"""The Python shim rides out a daemon that is not there, within its deadline.

Real Unix listeners in threads (the shim's peer check is pointed at our own
uid): a socket file that appears late, one nobody listens on, a listener
that closes without answering; and the cases that must never be sent twice.
The Go shim has the same cases in ``go test`` (cmd/kuryr-cni/retry_test.go);
both run as processes in tests/functional/test_shim_restart.py.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kuryr_supervisor.cni import shim
from tests.fixtures.listener import OK, Listener, read_request


@pytest.fixture(autouse=True)
def as_us(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shim, "REQUIRED_UID", os.geteuid())




def answering(answer: bytes) -> Callable[[int, socket.socket], None]:
    def handle(n: int, conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(answer)
    return handle


def later(seconds: float, action: Callable[[], None]) -> threading.Thread:
    timer = threading.Timer(seconds, action)
    timer.start()
    return timer


def call(path: str, timeout: float, command: str = "DEL") -> tuple[int, dict | None, list[str]]:
    lines: list[str] = []
    conf = json.dumps({"cniVersion": "1.0.0", "timeout": timeout,
                       "daemon_socket": f"unix://{path}"})
    status, out = shim.run({"CNI_COMMAND": command}, conf, log=lines.append)
    return status, json.loads(out) if out else None, lines


def test_socket_file_that_appears_after_300_ms(tmp_path: Path,
                                               listeners: list[Listener]) -> None:
    path = str(tmp_path / "cni.sock")
    timer = later(0.3, lambda: listeners.append(Listener(path, answering(OK))))
    started = time.monotonic()
    status, out, lines = call(path, 10)
    timer.join()
    assert (status, out) == (0, None)
    assert time.monotonic() - started >= 0.3
    assert lines == [f"DEL: kuryr-supervisor at unix://{path} is not there "
                     "(no socket file); retrying for up to 10 s"]
    assert listeners[0].count == 1


def test_socket_file_whose_listener_closed(tmp_path: Path,
                                          listeners: list[Listener]) -> None:
    path = str(tmp_path / "cni.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()                                   # refused from now on

    def restart() -> None:
        os.unlink(path)
        listeners.append(Listener(path, answering(OK)))

    timer = later(0.3, restart)
    status, out, lines = call(path, 10)
    timer.join()
    assert (status, out) == (0, None)
    assert len(lines) == 1 and "(connection refused)" in lines[0]


@pytest.mark.parametrize("first, reasons", [
    (read_request, {"closed before answering"}),
    (lambda conn: None, {"connection reset", "broken pipe"}),  # request unread
])
def test_closed_without_answering_the_first_time(
        tmp_path: Path, listeners: list[Listener],
        first: Callable[[socket.socket], None], reasons: set[str]) -> None:
    path = str(tmp_path / "cni.sock")

    def handle(n: int, conn: socket.socket) -> None:
        if n == 0:
            first(conn)
        else:
            answering(OK)(n, conn)

    listeners.append(Listener(path, handle))
    status, out, lines = call(path, 10)
    assert (status, out) == (0, None)
    assert listeners[0].count == 2
    assert len(lines) == 1 and any(f"({r})" in lines[0] for r in reasons), lines


@pytest.mark.parametrize("closing", [False, True])
def test_the_deadline_bounds_the_whole_call(tmp_path: Path, listeners: list[Listener],
                                            closing: bool) -> None:
    path = str(tmp_path / "cni.sock")
    if closing:
        listeners.append(Listener(path, lambda n, conn: read_request(conn)))
    started = time.monotonic()
    status, out, lines = call(path, 0.5, "ADD")
    elapsed = time.monotonic() - started
    assert status == 1 and out is not None and out["code"] == 11
    assert out["msg"] == "kuryr-supervisor is unreachable"
    reason = "closed before answering" if closing else "no socket file"
    assert out["details"].startswith(f"unix://{path}: {reason}; ")
    assert " attempts in 0." in out["details"]
    assert 0.48 <= elapsed < 2.0          # at the deadline, not long after
    assert len(lines) == 1


class FakeClock:
    """Time that passes only in ``sleep``: the pauses, without the wait."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def test_backoff_grows_and_is_jittered(tmp_path: Path) -> None:
    clock = FakeClock()
    address = f"unix://{tmp_path / 'none.sock'}"
    with pytest.raises(shim.ShimError) as err:
        shim.call_daemon(address, b"{}", 2.5, {}, log=lambda line: None,
                         clock=clock, sleep=clock.sleep)
    pauses = clock.pauses
    # 20 ms doubling to 1 s, each pause in [half, whole] of its step
    steps = [0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0]
    assert len(pauses) >= 7
    for pause, step in zip(pauses[:6], steps[:6], strict=True):
        assert step / 2 <= pause <= step, pauses
    assert len(set(pauses[:6])) == 6
    assert max(pauses) <= 1.0
    # Up to the deadline, the last pause cut short to leave one attempt.
    assert sum(pauses) == pytest.approx(2.5 - shim.LAST_ATTEMPT)
    assert err.value.code == shim.TRY_AGAIN
    assert err.value.details.endswith(f"{len(pauses) + 1} attempts in 2.5 s")


@pytest.mark.parametrize("name, handle, msg", [
    ("part of an answer, then closed",
     answering(b"HTTP/1.0 20"), "kuryr-supervisor is unreachable"),
    ("part of an answer, then reset",           # the request left unread
     lambda n, conn: conn.sendall(b"HTTP/1.0 200 OK\r\n"),
     "kuryr-supervisor is unreachable"),
    ("accepted, never answered",
     lambda n, conn: (read_request(conn), time.sleep(1)),
     "kuryr-supervisor did not answer in time"),
])
def test_never_sent_twice(tmp_path: Path, listeners: list[Listener], name: str,
                          handle: Callable[[int, socket.socket], None],
                          msg: str) -> None:
    path = str(tmp_path / "cni.sock")
    listeners.append(Listener(path, handle))
    status, out, lines = call(path, 0.5, "ADD")
    assert status == 1 and out is not None and out["code"] == 11, out
    assert out["msg"] == msg
    time.sleep(0.1)
    assert listeners[0].count == 1 and lines == []


def test_a_socket_root_does_not_serve_is_not_retried(
        tmp_path: Path, listeners: list[Listener],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shim, "REQUIRED_UID", os.geteuid() + 1)
    path = str(tmp_path / "cni.sock")
    listeners.append(Listener(path, answering(OK)))
    status, out, lines = call(path, 0.5, "ADD")
    assert status == 1 and out is not None and "not served by root" in out["msg"]
    time.sleep(0.1)
    assert listeners[0].count == 1 and lines == []


def test_permission_denied_is_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(address: str, timeout: float) -> socket.socket:
        attempts.append(address)
        raise PermissionError(13, "Permission denied")

    attempts: list[str] = []
    monkeypatch.setattr(shim, "_connect", denied)
    status, out, lines = call(str(tmp_path / "cni.sock"), 5, "ADD")
    assert status == 1 and out is not None and out["code"] == 11
    assert len(attempts) == 1 and lines == []


@pytest.mark.parametrize("command, named", [("GC", "GC"), ("X\nkuryr-cni: forged", "call"),
                                            ("", "call")])
def test_the_logged_command_is_a_known_one(tmp_path: Path, command: str,
                                           named: str) -> None:
    """The runtime's bytes are not copied into its log."""
    status, out, lines = call(str(tmp_path / "none.sock"), 0.05, command)
    assert len(lines) == 1 and lines[0].startswith(f"{named}: kuryr-supervisor at ")
