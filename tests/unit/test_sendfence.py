"""The write fence at the socket (:mod:`kuryr_supervisor.controller.openstack.sendfence`):
a process whose lease lapses between a call's check and the request's
first byte (a pause there) sends nothing; real HTTP on loopback, the
process under test a child, as the fence exits it."""
from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

CHILD = """
import sys
import requests
from kuryr_supervisor.controller.openstack import sendfence
from kuryr_supervisor.kubernetes.fence import WriteFence

url, lapses = sys.argv[1], sys.argv[2] == "lapses"
checks = []

def leading():
    checks.append(1)
    return not lapses or len(checks) == 1

fence = WriteFence(leading)
reads, writes = requests.Session(), requests.Session()
writes.mount("http://", sendfence.FencedAdapter(fence))
fence.check("POST /v2.0/ports")          # the call's own check: passes
if lapses:
    reads.post(url, data=b"outside", timeout=5)   # not the write session
    print("read", flush=True)
writes.post(url, data=b'{"ports": []}', timeout=5)
print("answered")
"""


class _Recorder(http.server.BaseHTTPRequestHandler):
    got: list[bytes] = []

    def do_POST(self) -> None:      # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length", 0))
        self.got.append(self.rfile.read(length))
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[http.server.ThreadingHTTPServer]:
    _Recorder.got = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("lapses", [False, True])
def test_a_lease_lapsed_before_the_send_sends_nothing(
        server: http.server.ThreadingHTTPServer, lapses: bool) -> None:
    url = f"http://127.0.0.1:{server.server_address[1]}/v2.0/ports"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, url, "lapses" if lapses else "holds"],
        capture_output=True, text=True, timeout=60)
    if lapses:
        assert done.returncode == 1, done
        assert "no longer holds the controller lease" in done.stderr, done
        assert "read" in done.stdout and "answered" not in done.stdout
        assert _Recorder.got == [b"outside"]
    else:
        assert done.returncode == 0 and "answered" in done.stdout, done
        assert _Recorder.got == [b'{"ports": []}']
