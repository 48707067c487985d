"""The systemd notify protocol, against a datagram socket standing in for systemd."""
from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from kuryr_supervisor.master.reporting import Reporter
from kuryr_supervisor.master.sdnotify import Notifier
from kuryr_supervisor.state import LiveCause, Overall


@pytest.fixture
def systemd(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(0.2)
    yield path, sock
    sock.close()


def received(sock: socket.socket) -> list[str]:
    out = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except TimeoutError:
            return out


def test_environment_is_captured_and_removed() -> None:
    env = {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "4000000",
           "WATCHDOG_PID": str(os.getpid()), "OTHER": "1"}
    n = Notifier.from_environment(env)
    assert n.enabled and n.watchdog_interval == 2.0
    assert env == {"OTHER": "1"}


def test_watchdog_for_another_pid_is_ignored() -> None:
    n = Notifier.from_environment({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "10",
                                   "WATCHDOG_PID": "1"})
    assert n.watchdog_interval is None


def test_without_systemd_everything_is_a_noop() -> None:
    assert Notifier.from_environment({}).notify("READY=1") is False


def verdict(live: bool, at: float, summary: str = "live, ready",
            ready: bool | None = None) -> Overall:
    return Overall(live=live, ready=live if ready is None else ready, cause=LiveCause.NONE if live else
                   LiveCause.MEMORY, checked_at=at, summary=summary)


def test_reporter_protocol(systemd: tuple[str, socket.socket]) -> None:
    path, sock = systemd
    hooks: list[bool] = []
    rep = Reporter(Notifier(path, watchdog_usec=2_000_000),
                   ready_hooks=[hooks.append])
    rep.update(verdict(True, 1.0, "starting", ready=False), ever_ready=False, now=1.0,
               checker_deadline=5)
    assert received(sock) == ["WATCHDOG=1",
                              "EXTEND_TIMEOUT_USEC=30000000\nSTATUS=starting: starting"]
    assert hooks == [False]
    rep.update(verdict(True, 1.5), ever_ready=True, now=1.5, checker_deadline=5)
    assert received(sock) == ["READY=1\nSTATUS=live, ready"]
    assert hooks == [False, True]
    rep.update(verdict(True, 2.0), ever_ready=True, now=2.0, checker_deadline=5)
    assert received(sock) == ["WATCHDOG=1"]   # one second since the last ping
    rep.update(verdict(False, 4.0, "not live: memory"), ever_ready=True, now=4.0,
               checker_deadline=5)
    assert received(sock) == ["STATUS=not live: memory"]  # no WATCHDOG
    rep.update(verdict(True, 4.0), ever_ready=True, now=20.0, checker_deadline=5)
    got = received(sock)   # verdict too old: not live, no ping
    assert got == ["STATUS=not live: no recent verdict from the HealthManager"]
    rep.stopping()
    assert received(sock) == ["STOPPING=1\nSTATUS=stopping: draining"]
    assert hooks[-1] is False  # the last verdict was too old to count


def test_failing_first_ready_hook_does_not_stop_ready(
        systemd: tuple[str, socket.socket]) -> None:
    path, sock = systemd

    def broken(ready: bool) -> None:
        raise OSError("read-only /opt/cni/bin")

    rep = Reporter(Notifier(path), ready_hooks=[broken])
    rep.update(verdict(True, 1.0), ever_ready=True, now=1.0, checker_deadline=5)
    assert received(sock)[0].startswith("READY=1")


def test_start_timeout_is_extended_only_while_alive_and_not_ready(
        systemd: tuple[str, socket.socket]) -> None:
    """An API outage at boot keeps the unit activating (alive, not ready);
    a daemon that is not alive stops extending and meets TimeoutStartSec."""
    path, sock = systemd
    rep = Reporter(Notifier(path))
    waiting = "not ready: k8s-api: connection refused"
    rep.update(verdict(True, 1.0, waiting, ready=False), ever_ready=False,
               now=1.0, checker_deadline=5)
    assert received(sock) == [f"EXTEND_TIMEOUT_USEC=30000000\nSTATUS=starting: {waiting}"]
    rep.update(verdict(True, 5.0, waiting, ready=False), ever_ready=False,
               now=5.0, checker_deadline=5)
    assert received(sock) == []           # not yet due
    rep.update(verdict(False, 12.0, "not live: memory", ready=False),
               ever_ready=False, now=12.0, checker_deadline=5)
    assert received(sock) == []           # not alive: no extension
    rep.update(verdict(True, 40.0, waiting, ready=False), ever_ready=False,
               now=40.0, checker_deadline=5)
    assert received(sock)[0].startswith("EXTEND_TIMEOUT_USEC=")
    rep.update(verdict(True, 60.0), ever_ready=True, now=60.0, checker_deadline=5)
    assert received(sock) == ["READY=1\nSTATUS=live, ready"]
    rep.update(verdict(True, 80.0), ever_ready=True, now=80.0, checker_deadline=5)
    assert received(sock) == []           # ready: no more extensions
