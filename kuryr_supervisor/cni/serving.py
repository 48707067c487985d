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
only if it is still ours; a socket file deleted or replaced under the
running server is noticed within :data:`SOCKET_WATCH_INTERVAL` (plus one
poll), published as ``Fault.SOCKET`` (readiness ``cni-environment``) and
bound again (:meth:`CNIServer.watch_socket`).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler

from kuryr_supervisor import errors
from kuryr_supervisor.cni import protocol
from kuryr_supervisor.cni.sockets import (
    AddressInUse,
    UntrustedPath,
    bind_tcp,
    bind_unix,
    parse_address,
)
from kuryr_supervisor.state import Fault, SharedState

LOG = logging.getLogger(__name__)


#: Seconds between checks that the socket file at the path is still ours.
SOCKET_WATCH_INTERVAL = 1.0


def _identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path``; None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


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
        self._inode = _identity(path) if self.unix_path else None
        self._next_watch = 0.0
        self._lost_logged = False
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
        if self.unix_path:
            self._set_fault(False)    # freshly bound: ours again

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
        if self.unix_path and time.monotonic() >= self._next_watch:
            self._next_watch = time.monotonic() + SOCKET_WATCH_INTERVAL
            self.watch_socket()

    # -- the socket file -----------------------------------------------------
    def watch_socket(self) -> bool:
        """Notice our socket file deleted or replaced; bind it again.

        Clients reach the daemon by path, so a socket file removed (a
        cleanup script, a second daemon's unlink) makes every ADD fail while
        the process looks healthy. The fault is published (readiness fails
        naming the socket) until a fresh socket is bound at the path and
        swapped in under the accept loop (``dup2`` onto the listening
        descriptor: the loop's poll keeps waiting on the same number).
        Returns True when the socket at the path is ours.
        """
        path = self.unix_path
        if path is None or self._stopping.is_set():
            return True
        if _identity(path) == self._inode:
            return True
        if not self._lost_logged:
            LOG.error("CNI socket %s was deleted or replaced; binding it "
                      "again", path)
            self._lost_logged = True
        self._set_fault(True)
        try:
            fresh = bind_unix(path)
        except (OSError, AddressInUse, UntrustedPath) as exc:
            LOG.debug("cannot bind %s again yet: %s", path, exc)
            return False
        with fresh:
            os.dup2(fresh.fileno(), self.socket.fileno())
        self._inode = _identity(path)
        self._lost_logged = False
        self._set_fault(False)
        LOG.warning("CNI socket %s bound again", path)
        return True

    def _set_fault(self, present: bool) -> None:
        if self._state is not None:
            self._state.set_fault(Fault.SOCKET, present)

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
        if self.unix_path and _identity(self.unix_path) == self._inode:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.unix_path)

    def wait_idle(self, timeout: float) -> bool:
        """Wait for in-flight requests to finish; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._inflight == 0, timeout)
