"""The bounded probe server over real sockets on loopback, and its framing.

Each limit is checked the way an attacker meets it: a slowloris client
(a byte at a time) is cut at the header deadline even though it never
stops sending, an idle keep-alive client is closed, and far more clients
than the limit leave the server with a bounded number of connections and
threads while a new probe still gets its answer.
"""
from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from werkzeug.wrappers import Request, Response

from kuryr_supervisor.health import wsgi
from kuryr_supervisor.health.httpserver import (
    BoundedHTTPServer,
    Limits,
    listen,
    serve,
)


@Request.application
def echo(request: Request) -> Response:
    if request.path == "/boom":
        raise RuntimeError("app failure")
    return Response(f"{request.method} {request.path} {request.args.get('q')} "
                    f"{request.get_data().decode()}", mimetype="text/plain")


def serve_on_loopback(limits: Limits) -> BoundedHTTPServer:
    """As in the daemon: the listening socket is bound outside the server
    (the master's), the server serves its own duplicate."""
    with listen("127.0.0.1", 0) as sock:
        return serve(echo, sock, limits)


LIMITS = Limits(max_connections=16, threads=2, header_timeout=0.6,
                idle_timeout=0.4)


@pytest.fixture
def server() -> Iterator[BoundedHTTPServer]:
    srv = serve_on_loopback(LIMITS)
    yield srv
    srv.close()


def get(port: int, path: str, conn: http.client.HTTPConnection | None = None
        ) -> tuple[int, str]:
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        if own:
            conn.close()


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed ``sock`` (None: still open)."""
    start = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - start


def test_answers_and_keeps_alive(server: BoundedHTTPServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        assert get(server.port, "/a?q=1", conn) == (200, "GET /a 1 ")
        assert get(server.port, "/b%20c", conn) == (200, "GET /b c None ")
        conn.request("POST", "/p", body=b"xyz")
        assert conn.getresponse().read() == b"POST /p None xyz"
    finally:
        conn.close()
    assert server.stats["closed by client"] <= 1


def test_app_failure_is_a_500_and_the_server_goes_on(
        server: BoundedHTTPServer) -> None:
    assert get(server.port, "/boom")[0] == 500
    assert get(server.port, "/ok")[0] == 200


def test_slowloris_is_cut_at_the_header_deadline(
        server: BoundedHTTPServer) -> None:
    sock = socket.create_connection(("127.0.0.1", server.port))
    stop = threading.Event()

    def trickle() -> None:       # a byte every 50 ms: never idle
        for byte in b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200:
            if stop.wait(0.05):
                return
            try:
                sock.send(bytes([byte]))
            except OSError:
                return

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        took = closed_within(sock, 3.0)
    finally:
        stop.set()
        thread.join()
        sock.close()
    assert took is not None and took < LIMITS.header_timeout + 1.5
    assert server.stats["header timeout"] == 1


def test_idle_keep_alive_is_closed(server: BoundedHTTPServer) -> None:
    sock = socket.create_connection(("127.0.0.1", server.port))
    try:
        sock.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"200 OK" in sock.recv(4096)
        took = closed_within(sock, 3.0)
    finally:
        sock.close()
    assert took is not None and took < LIMITS.idle_timeout + 1.5
    assert server.stats["idle timeout"] == 1


def test_connections_and_threads_stay_bounded(
        server: BoundedHTTPServer) -> None:
    def server_threads() -> int:
        # The server's own, by name: other tests' threads may end meanwhile.
        return sum(t.name.startswith("probe-") for t in threading.enumerate())
    threads_before = server_threads()
    socks = [socket.create_connection(("127.0.0.1", server.port))
             for _ in range(LIMITS.max_connections * 4)]
    try:
        for s in socks:
            s.send(b"GET / HTTP/1.1\r\n")       # started, never finished
        time.sleep(0.2)
        assert server.connections <= LIMITS.max_connections
        assert server_threads() == threads_before
        start = time.monotonic()
        assert get(server.port, "/probe")[0] == 200   # the newcomer gets in
        assert time.monotonic() - start < 2.0
        assert server.stats["evicted"] >= LIMITS.max_connections * 3
    finally:
        for s in socks:
            s.close()


_HAMMER = """
import socket, sys, threading, time
port, seconds = int(sys.argv[1]), float(sys.argv[2])
request = b"GET /x HTTP/1.1\\r\\nHost: t\\r\\nConnection: close\\r\\n\\r\\n"
errors, done = [], [0]
def client():
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(request)
                answer = b""
                # Like the kubelet: done at Content-Length, never waits for
                # the server's FIN, so it reconnects before the server has
                # taken the answered connection back.
                while data := s.recv(4096):
                    answer += data
                    head, _, body = answer.partition(b"\\r\\n\\r\\n")
                    length = [int(v) for k, _, v in (
                        line.partition(b":") for line in head.split(b"\\r\\n"))
                        if k.strip().lower() == b"content-length"]
                    if _ and length and len(body) >= length[0]:
                        break
            if not answer.startswith(b"HTTP/1.1 200"):
                errors.append(repr(answer[:40]))
        except OSError as exc:
            errors.append(repr(exc))
        done[0] += 1
threads = [threading.Thread(target=client) for _ in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
print(done[0], len(errors), errors[:3])
"""


def test_honest_clients_far_below_the_limit_are_never_shed() -> None:
    """Eight clients that connect, ask once and close, as fast as they can
    (from another process, as a kubelet would), never hold more than eight
    connections: none may be refused or evicted, even while answers written
    during one accept batch wait for the selector to take them back."""
    srv = serve_on_loopback(Limits(max_connections=16, threads=4))
    try:
        done = subprocess.run([sys.executable, "-c", _HAMMER, str(srv.port), "2"],
                              capture_output=True, text=True, timeout=60)
    finally:
        srv.close()
    count, failed, sample = done.stdout.split(" ", 2)
    assert int(count) > 100, done.stdout + done.stderr
    assert failed == "0", done.stdout
    assert not srv.stats["refused"] and not srv.stats["evicted"], srv.stats


@pytest.mark.parametrize("raw", [
    b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
    b"GET / HTTP/2.0\r\n\r\n",
    b"GET /\r\n\r\n",
    b"GET / HTTP/1.1\r\nbad header\r\n\r\n",
])
def test_malformed_requests_are_refused(raw: bytes) -> None:
    with pytest.raises(wsgi.BadRequest):
        wsgi.complete(raw, 8192, 65536)


def test_limits_on_header_and_body_size() -> None:
    with pytest.raises(wsgi.BadRequest):
        wsgi.complete(b"GET / HTTP/1.1\r\nX: " + b"a" * 9000, 8192, 65536)
    with pytest.raises(wsgi.BadRequest):
        wsgi.complete(b"POST / HTTP/1.1\r\nContent-Length: 70000\r\n\r\n",
                      8192, 65536)
    assert not wsgi.complete(b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nab",
                             8192, 65536)
    request, rest = wsgi.split(b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\n"
                               b"abcGET")
    assert (request.body, rest) == (b"abc", b"GET")
