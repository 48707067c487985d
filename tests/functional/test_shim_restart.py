"""Both shims ride out a daemon restart: exec'd as a runtime does, each
waits for a daemon that is not there yet, within its deadline.

Real processes: the shim (Python through its shebang, Go compiled) against
real Unix listeners run as root (the peer check passes): a socket file that
appears 300 ms late, one whose listener closed (refused), a listener that
closes without answering the first time, a full listen backlog (EAGAIN);
a short deadline ends in code 11
on time; an answer of which a byte was sent is never asked for twice. Then
a real daemon (``tests/fixtures/daemon.py``) started after the ADD, into a
real network namespace.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import Daemon
from tests.fixtures.listener import OK, Listener, read_request
from tests.functional.cni_harness import HOST_PATH, Namespaces, ip_json, unique

pytestmark = pytest.mark.privileged



@pytest.fixture
def shim(tmp_path: Path, shim_factory: Callable[[str], str]) -> str:
    directory = tmp_path / "cni-bin"
    directory.mkdir()
    return shim_factory(str(directory))




def answering(answer: bytes) -> Callable[[int, socket.socket], None]:
    def handle(n: int, conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(answer)
    return handle


def start(shim: str, command: str, netconf: dict[str, Any], **env: str
          ) -> subprocess.Popen[str]:
    environ = {"PATH": HOST_PATH, "CNI_COMMAND": command, "CNI_IFNAME": "eth0",
               "CNI_PATH": "/opt/cni/bin", **env}
    proc = subprocess.Popen([shim], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=environ, text=True)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(netconf))
    proc.stdin.close()
    return proc


def finish(proc: subprocess.Popen[str], timeout: float = 60
           ) -> tuple[int, Any, list[str]]:
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()
    status = proc.wait(timeout)
    return status, json.loads(out) if out.strip() else None, err.splitlines()


def netconf(path: str, timeout: float) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "kuryr", "type": "kuryr-cni",
            "daemon_socket": f"unix://{path}", "timeout": timeout}


def test_waits_for_a_socket_file_that_appears(shim: str, tmp_path: Path,
                                              listeners: list[Listener]) -> None:
    path = str(tmp_path / "cni.sock")
    started = time.monotonic()
    proc = start(shim, "DEL", netconf(path, 20), CNI_CONTAINERID="x1")
    time.sleep(0.3)
    listeners.append(Listener(path, answering(OK)))
    status, out, err = finish(proc)
    assert (status, out) == (0, None), err
    assert time.monotonic() - started >= 0.3
    assert err == [f"kuryr-cni: DEL: kuryr-supervisor at unix://{path} is not "
                   "there (no socket file); retrying for up to 20 s"]
    assert listeners[0].count == 1


def test_waits_through_a_socket_file_nobody_listens_on(
        shim: str, tmp_path: Path, listeners: list[Listener]) -> None:
    path = str(tmp_path / "cni.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()                      # the file of a daemon that is gone
    proc = start(shim, "DEL", netconf(path, 20), CNI_CONTAINERID="x1")
    time.sleep(0.3)
    os.unlink(path)
    listeners.append(Listener(path, answering(OK)))
    status, out, err = finish(proc)
    assert (status, out) == (0, None), err
    assert len(err) == 1 and "(connection refused)" in err[0]


def test_sends_again_after_a_close_without_answer(
        shim: str, tmp_path: Path, listeners: list[Listener]) -> None:
    path = str(tmp_path / "cni.sock")

    def handle(n: int, conn: socket.socket) -> None:
        read_request(conn)
        if n:
            conn.sendall(OK)

    listeners.append(Listener(path, handle))
    status, out, err = finish(start(shim, "DEL", netconf(path, 20),
                                    CNI_CONTAINERID="x1"))
    assert (status, out) == (0, None), err
    assert listeners[0].count == 2
    assert len(err) == 1 and "(closed before answering)" in err[0]


def test_waits_while_the_listen_backlog_is_full(shim: str, tmp_path: Path) -> None:
    """A daemon that accepts nothing for a while (a worker restarting behind
    its socket) and whose backlog filled: connect says EAGAIN; the shim
    waits, and is answered once the daemon accepts again."""
    path = str(tmp_path / "cni.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(0)
    fillers = []
    try:
        while True:                     # fill the backlog: then EAGAIN
            filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            filler.setblocking(False)
            fillers.append(filler)
            filler.connect(path)
    except BlockingIOError:
        fillers.pop().close()
    proc = start(shim, "DEL", netconf(path, 20), CNI_CONTAINERID="x1")
    time.sleep(0.3)
    for filler in fillers:
        filler.close()
    served = []

    def serve() -> None:                # accept again: the fillers, then us
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                with conn:
                    data = conn.recv(65536)
                    if data:
                        read_request(conn)
                        conn.sendall(OK)
                        served.append(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        status, out, err = finish(proc)
    finally:
        server.shutdown(socket.SHUT_RDWR)
        thread.join(5)
        server.close()
    assert (status, out) == (0, None), err
    assert len(err) == 1 and "(listen backlog full)" in err[0], err
    assert len(served) == 1 and served[0].startswith(b"POST /cni ")


def test_a_short_deadline_ends_in_code_11_on_time(shim: str, tmp_path: Path) -> None:
    path = str(tmp_path / "cni.sock")
    started = time.monotonic()
    status, out, err = finish(start(shim, "ADD", netconf(path, 1),
                                    CNI_CONTAINERID="x1", CNI_NETNS="/x"))
    elapsed = time.monotonic() - started
    assert status == 1 and out["code"] == 11 and out["cniVersion"] == "1.0.0"
    assert out["msg"] == "kuryr-supervisor is unreachable"
    assert out["details"].startswith(f"unix://{path}: no socket file; ")
    assert 0.95 <= elapsed < 3.0, elapsed       # the deadline, process start-up
    assert len(err) == 1


def test_status_without_a_daemon_is_code_50_within_its_bound(
        shim: str, tmp_path: Path, listeners: list[Listener]) -> None:
    """STATUS rides out a missing daemon for 2 s at most, whatever the
    netconf's timeout (a runtime waits for it every few seconds), and
    says the plugin is not available (50), not "try again" (11); a daemon
    that comes back within the bound still answers it."""
    path = str(tmp_path / "cni.sock")
    started = time.monotonic()
    status, out, err = finish(start(shim, "STATUS", netconf(path, 60)))
    elapsed = time.monotonic() - started
    assert status == 1 and out["code"] == 50, out
    assert out["msg"] == "kuryr-supervisor is unreachable"
    assert out["details"].startswith(f"unix://{path}: no socket file; ")
    assert 1.9 <= elapsed < 10, elapsed        # 2 s, not the netconf's 60
    assert err == [f"kuryr-cni: STATUS: kuryr-supervisor at unix://{path} is "
                   "not there (no socket file); retrying for up to 2 s"]
    proc = start(shim, "STATUS", netconf(path, 60))
    time.sleep(0.3)
    listeners.append(Listener(path, answering(OK)))
    assert finish(proc)[:2] == (0, None)


def test_an_answer_begun_is_final(shim: str, tmp_path: Path,
                                  listeners: list[Listener]) -> None:
    path = str(tmp_path / "cni.sock")
    listeners.append(Listener(path, answering(b"HTTP/1.0 200 OK\r\nContent-")))
    status, out, err = finish(start(shim, "ADD", netconf(path, 5),
                                    CNI_CONTAINERID="x1", CNI_NETNS="/x"))
    assert status == 1 and out["code"] == 11, out
    assert out["details"] == f"unix://{path}: no valid HTTP answer"
    time.sleep(0.2)
    assert listeners[0].count == 1 and err == []


@pytest.fixture
def late_daemon(tmp_path: Path) -> Iterator[Daemon]:
    workdir = tmp_path / "daemon"
    workdir.mkdir()
    daemon = Daemon(workdir)
    yield daemon
    daemon.close()


def test_add_issued_before_the_daemon_starts(shim: str, late_daemon: Daemon,
                                             namespaces: Namespaces) -> None:
    """The runtime's ADD arrives while the daemon is not running (its socket
    absent): it waits, the daemon starts, the ADD succeeds once."""
    ns, cid = namespaces.create(), unique("c", 20)
    path = str(late_daemon.socket_path)
    assert not os.path.exists(path)
    conf = {**netconf(path, 60), "cniVersion": "1.1.0"}
    proc = start(shim, "ADD", conf, CNI_CONTAINERID=cid,
                 CNI_NETNS=f"/var/run/netns/{ns}")
    assert proc.stderr is not None
    line = proc.stderr.readline()            # retrying: the daemon is not there
    assert "(no socket file); retrying for up to 60 s" in line, line
    late_daemon.start()
    status, result, err = finish(proc, 90)
    assert status == 0, (result, err, late_daemon.log())
    assert err == []                         # the one line was read above
    address = result["ips"][0]["address"]
    eth0 = [a for link in ip_json("-n", ns, "addr") if link["ifname"] == "eth0"
            for a in link["addr_info"] if a["family"] == "inet"]
    assert [f"{a['local']}/{a['prefixlen']}" for a in eth0] == [address]
    status, out, err = finish(start(shim, "DEL", conf, CNI_CONTAINERID=cid,
                                    CNI_NETNS=f"/var/run/netns/{ns}"))
    assert (status, out, err) == (0, None, [])
    assert ip_json("-n", ns, "link", "show", "eth0") == []
