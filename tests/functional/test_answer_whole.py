"""The Server sends each CNI answer whole, in one write.

Why: the shims send a request again only when not one byte of an answer
came (a Server killed before answering); an answer of which a byte came is
final. A Server SIGKILLed between writing the headers and the body would
leave the shim headers without a body: code 11 to the runtime, for a
request that had succeeded (the chaos drill saw it). With the answer in
one write, a kill leaves nothing (sent again, replayed) or all of it.

A real daemon run under ``strace -f`` from its start: an ADD and a DEL
through the shim into a real namespace, and a malformed request (the
protocol-error path); every write or send that carries an ``HTTP/``
answer must hold its headers and a body of exactly ``Content-Length``.
"""
from __future__ import annotations

import codecs
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from drills.common import Workspace
from tests.fixtures.daemon import Daemon, wait_until

pytestmark = pytest.mark.privileged
CALL = re.compile(rb'^\d+\s+(?:write|sendto|sendmsg)\(\d+, (?:\{msg_name=.*?)?"((?:[^"\\]|\\.)*)"')


class TracedDaemon(Daemon):
    def start(self) -> Daemon:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["strace", "-f", "-qq", "-s", "65536", "-e",
                 "trace=write,sendto,sendmsg", "-o", str(self.workdir / "trace"),
                 sys.executable, "-m", "kuryr_supervisor.daemon",
                 "--config-file", str(self.config)],
                stdout=log, stderr=subprocess.STDOUT)
        return self

    def master(self) -> int:
        with open(f"/proc/{self.pid}/task/{self.pid}/children") as f:
            return int(f.read().split()[0])


def answers(trace: Path) -> list[bytes]:
    """The data of every traced write that starts an HTTP answer."""
    found = []
    for line in trace.read_bytes().splitlines():
        match = CALL.match(line)
        if match:
            data = codecs.escape_decode(match.group(1))[0]
            if data.startswith(b"HTTP/"):
                found.append(data)
    return found


def test_every_answer_is_one_write(tmp_path: Path) -> None:
    assert shutil.which("strace"), "strace is not installed"
    with Workspace("whole") as ws:
        (ws.root / "d").mkdir()
        ws.daemons.append(daemon := TracedDaemon(ws.root / "d", {}))
        daemon.start()
        wait_until(lambda: os.path.exists(f"/proc/{daemon.pid}/task/{daemon.pid}/children")
                   and open(f"/proc/{daemon.pid}/task/{daemon.pid}/children").read(), 30)
        ws.sessions.add(daemon.master())      # the master leads the session
        daemon.wait_ready(90)
        conf, netns = ws.netconf(daemon), ws.netns()
        add = ws.shim("ADD", conf, container_id="wholeanswer", netns=netns)
        assert add.status == 0, add.stdout + add.stderr
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(daemon.socket_path))
            sock.sendall(b"BREW /cni HTTP/1.0\r\n\r\n")
            bad = b"".join(iter(lambda: sock.recv(65536), b""))
        assert bad.startswith(b"HTTP/1.0 4"), bad
        delete = ws.shim("DEL", conf, container_id="wholeanswer", netns=netns)
        assert delete.status == 0, delete.stdout + delete.stderr
        os.kill(daemon.master(), signal.SIGTERM)
        assert daemon.wait_exit(60) == 0, daemon.log()
        sent = answers(ws.root / "d" / "trace")
    bodies = []
    for data in sent:
        head, sep, body = data.partition(b"\r\n\r\n")
        assert sep, f"headers cut from their end: {data!r}"
        lengths = [int(v) for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
                   if k.strip().lower() == b"content-length"]
        assert lengths in ([], [len(body)]), f"an answer sent in parts: {data!r}"
        bodies.append(body)
    # the ADD's result and the protocol error were among them, whole (the
    # probes' answers, traced too, are not JSON objects)
    objects = [_json(b) for b in bodies]
    assert any("ips" in o for o in objects), sent
    assert any("code" in o for o in objects), sent


def _json(body: bytes) -> dict[str, object]:
    try:
        value = json.loads(body)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
