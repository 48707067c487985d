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

Invariants: the Server never binds and never unlinks. The listening socket
is the master's (:mod:`kuryr_supervisor.master.listeners`), inherited
across the fork, so a Server that dies leaves new connections waiting in
the kernel's backlog for its successor. Protocol-level errors are answered
in JSON like everything else. A socket file deleted or replaced under the
running daemon is noticed by the master, which re-creates it and hands it
over (:class:`~kuryr_supervisor.cni.handoff.Handoff`); the Server, the
writer of the fault bits, publishes the fault the master names
(``Fault.SOCKET``, ``SOCKET_BLOCKED`` or ``SOCKET_UNTRUSTED``; readiness
``cni-environment``) while the path is not the master's socket, clears it
when the master says its own socket file is back, swaps the new
socket in under its accept loop (``dup2`` onto the listening descriptor, so
the loop's poll keeps waiting on the same number) and clears the fault
(:meth:`CNIServer.take_notices`).
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler

from kuryr_supervisor import errors
from kuryr_supervisor.cni import protocol
from kuryr_supervisor.cni.handoff import Handoff
from kuryr_supervisor.state import Fault, SharedState

LOG = logging.getLogger(__name__)


class _Handler(WSGIRequestHandler):
    """werkzeug's handler, with JSON protocol errors and quiet logging."""

    # HTTP/1.0: one request per connection, so an idle client never holds
    # one of the bounded slots between requests.
    protocol_version = "HTTP/1.0"
    # The whole answer (status line, headers, body) is buffered and sent by
    # one write: a Server SIGKILLed mid-answer then leaves either nothing
    # (the shim sends the request again; ADD replays) or all of it, never
    # headers without their body (final for the shim: code 11).
    wbufsize = 1 << 16
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

    def __init__(self, sock: socket.socket, app: Any, *,
                 max_concurrency: int = 64, request_timeout: float = 30.0,
                 state: SharedState | None = None,
                 on_poll: Callable[[], None] | None = None,
                 handoff: Handoff | None = None) -> None:
        """Serve ``app`` on the listening socket ``sock`` (a duplicate is
        kept; the caller may close its own). ``handoff`` brings a re-created
        Unix socket from the master."""
        name = sock.getsockname()
        if sock.family == socket.AF_UNIX:
            host, port = f"unix://{name}", 0
        else:
            host, port = name[0], name[1]
        self.address = host if port == 0 else f"{host}:{port}"
        self.capacity = max_concurrency
        self.request_timeout = request_timeout
        self._state = state
        self._on_poll = on_poll
        self._handoff = handoff
        self._swapping = False      # no notice taken while applying one
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._inflight = 0
        self._idle = threading.Condition()
        self._stopping = threading.Event()
        self._serving = False
        self._run_lock = threading.Lock()
        super().__init__(host, port, app, handler=_Handler, fd=sock.fileno())
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
        if self._handoff is not None and not self._stopping.is_set() \
                and not self._swapping:
            self.take_notices()

    # -- the socket file -----------------------------------------------------
    def take_notices(self) -> None:
        """Apply the master's notices about the CNI socket file.

        Clients reach the daemon by path, so a socket file removed (a
        cleanup script, a second daemon's unlink) makes every ADD fail while
        the process looks healthy: the fault is published until the master
        has bound a fresh socket at the path. Connections already queued on
        the old socket are accepted before it is replaced, so none is lost.
        """
        assert self._handoff is not None
        for notice in self._handoff.receive():
            if notice.sock is None:
                self._set_fault(notice.fault)
                if not notice.fault:
                    LOG.warning("CNI socket file is the master's again: "
                                "serving it")
                continue
            self._swapping = True   # process_request may poll when full
            try:
                with notice.sock as fresh:
                    self._accept_queued()
                    os.dup2(fresh.fileno(), self.socket.fileno())
            finally:
                self._swapping = False
            self.socket.setblocking(True)
            self._set_fault(Fault.NONE)
            LOG.warning("CNI socket re-created by the master: serving it")

    def _accept_queued(self) -> None:
        self.socket.setblocking(False)
        while True:
            try:
                request, client_address = self.socket.accept()
            except OSError:
                return
            self.process_request(request, client_address)

    def _set_fault(self, fault: Fault) -> None:
        """Publish ``fault`` as the socket's only fault (NONE: clear)."""
        if self._state is not None:
            self._state.set_fault(Fault.SOCKET_ANY & ~fault, False)
            if fault:
                self._state.set_fault(fault, True)

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
        """Stop the accept loop (from another thread) and close this
        process's copy of the socket. The master still holds it: new
        clients wait in the backlog for the next Server (or, when the
        daemon stops, are reset once the master closes it last)."""
        with self._run_lock:
            self._stopping.set()
            serving = self._serving
        if serving:
            self.shutdown()     # returns once serve_forever has left
        self.server_close()

    def wait_idle(self, timeout: float) -> bool:
        """Wait for in-flight requests to finish; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._inflight == 0, timeout)
