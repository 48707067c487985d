"""The HTTP server of the CNI API: a Unix socket (default) or TCP host:port.

Threads, not processes, and why: a request waits mostly in syscalls
(netlink, setns, the SQLite WAL fsync, flock) that release the GIL, and the
CPU part of an ADD (measured at about 25 ms, nearly all pyroute2 message
encoding and decoding) would gain at most the second core of a 2-core node
from a process pool -- the core a burst of shim processes is already using.
Against that, processes would break invariants that hold because the Server
is one process: the shared-state fields it writes (the failure budget,
inflight/capacity) have exactly one writing process, and SQLite connections
and netlink sockets must not cross a fork. So: one process, a thread per
request, bounded.

Bounded concurrency: at most ``max_concurrency`` requests run at once. The
accept loop takes a slot before accepting more; while all slots are busy,
new connections wait in the listen backlog (clients time out on their own
terms) and the loop keeps calling ``on_poll`` so the worker keeps
heartbeating while saturated. Every change of the in-flight count is
published with ``state.set_server_load``.

Invariants: the socket comes from :mod:`kuryr_supervisor.cni.sockets`
(root-only Unix socket, stale file replaced); protocol-level errors are
answered in JSON like everything else; draining removes the socket file
only if it is still ours.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler

from kuryr_supervisor import errors
from kuryr_supervisor.cni import protocol
from kuryr_supervisor.cni.sockets import bind_tcp, bind_unix, parse_address
from kuryr_supervisor.state import SharedState

LOG = logging.getLogger(__name__)


class _Handler(WSGIRequestHandler):
    """werkzeug's handler, with JSON protocol errors and quiet logging."""

    # HTTP/1.0: one request per connection, so an idle client never holds
    # one of the bounded slots between requests.
    protocol_version = "HTTP/1.0"
    server: CNIServer

    def setup(self) -> None:
        # A client that stalls mid-request must not hold a slot for ever.
        self.request.settimeout(self.server.request_timeout)
        super().setup()

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        exc = errors.DecodeError(message or HTTPStatus(code).phrase,
                                 explain or "")
        body = (json.dumps(exc.to_cni(protocol.LATEST)) + "\n").encode()
        self.send_response(code, message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if getattr(self, "command", None) != "HEAD" and code >= 200:
            self.wfile.write(body)
        self.close_connection = True

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        # Before a request line parsed, command and path may not exist.
        LOG.debug("%s %s -> %s", getattr(self, "command", None),
                  getattr(self, "path", None), code)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        LOG.debug("http: " + format, *args)

    def log_error(self, format: str, *args: Any) -> None:  # noqa: A002
        LOG.info("http: " + format, *args)


class CNIServer(BaseWSGIServer):
    """A bounded, thread-per-request WSGI server on a pre-bound socket."""

    multithread = True
    daemon_threads = True

    def __init__(self, address: str, app: Any, *, max_concurrency: int = 64,
                 request_timeout: float = 30.0, state: SharedState | None = None,
                 on_poll: Callable[[], None] | None = None) -> None:
        path, port = parse_address(address)
        if port < 0:
            sock, host, port = bind_unix(path), f"unix://{path}", 0
        else:
            sock, host = bind_tcp(path, port), path
        self.unix_path = path if host.startswith("unix://") else None
        self._inode = os.stat(path).st_ino if self.unix_path else 0
        self.address = address
        self.capacity = max_concurrency
        self.request_timeout = request_timeout
        self._state = state
        self._on_poll = on_poll
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._inflight = 0
        self._idle = threading.Condition()
        self._stopping = threading.Event()
        self._serving = False
        self._run_lock = threading.Lock()
        try:
            super().__init__(host, port, app, handler=_Handler,
                             fd=sock.fileno())
        finally:
            sock.close()          # werkzeug keeps its own duplicate
        self._publish()

    # -- accept loop ------------------------------------------------------
    def serve_forever(self, poll_interval: float = 0.5) -> None:
        with self._run_lock:
            if self._stopping.is_set():
                return
            self._serving = True
        super().serve_forever(poll_interval=poll_interval)

    def service_actions(self) -> None:
        if self._on_poll is not None:
            self._on_poll()

    def process_request(self, request: Any, client_address: Any) -> None:
        while not self._slots.acquire(timeout=0.2):
            self.service_actions()      # saturated, but alive
            if self._stopping.is_set():
                self.shutdown_request(request)
                return
        self._change(+1)
        thread = threading.Thread(target=self._run, name="cni-request",
                                  args=(request, client_address), daemon=True)
        thread.start()

    def _run(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - one bad connection, not the server
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._change(-1)
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        LOG.exception("error while serving a CNI connection")

    # -- load and drain ---------------------------------------------------
    def _change(self, delta: int) -> None:
        with self._idle:
            self._inflight += delta
            if self._inflight == 0:
                self._idle.notify_all()
        self._publish()

    def _publish(self) -> None:
        if self._state is not None:
            self._state.set_server_load(self._inflight, self.capacity)

    @property
    def inflight(self) -> int:
        return self._inflight

    def stop_accepting(self) -> None:
        """Stop the accept loop (from another thread) and close the socket;
        new clients then fail fast and the shim answers code 11."""
        with self._run_lock:
            self._stopping.set()
            serving = self._serving
        if serving:
            self.shutdown()     # returns once serve_forever has left
        self.server_close()
        if self.unix_path:
            with contextlib.suppress(FileNotFoundError):
                if os.stat(self.unix_path).st_ino == self._inode:
                    os.unlink(self.unix_path)

    def wait_idle(self, timeout: float) -> bool:
        """Wait for in-flight requests to finish; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._inflight == 0, timeout)
