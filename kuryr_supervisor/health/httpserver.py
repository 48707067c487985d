"""A bounded HTTP/1.1 server for the probe endpoints (any WSGI app).

Why this server and not werkzeug's (or the standard library's) threaded
one: those start one thread per connection and wait on ``readline`` with no
deadline, so a local user who opens a few thousand connections and sends
their headers a byte at a time holds a few thousand threads, starves the
HealthManager's own loop of the GIL and makes the probes time out: the
kubelet then restarts a healthy daemon. Well-kept WSGI servers were weighed
too: waitress and cheroot bound connections, but their timeouts restart on
every byte received (a byte a second keeps a slowloris connection for ever)
and either would be a new dependency of the node daemon. The probe traffic
is tiny (a few GETs a second), so a small server that owns its limits is
the smaller risk.

The listening socket is not this server's: the master binds it before it
forks (:func:`listen`) and the HealthManager inherits it, so a probe that
arrives while a HealthManager is being replaced waits in the kernel's
backlog and is answered by the next one -- the kubelet sees latency, never
``connection refused``.

Shape: this module's one selector thread accepts connections and reads
requests without blocking; a complete request goes to a fixed pool of
threads (:mod:`.answering`) that run the WSGI app (werkzeug's, unchanged)
and write the answer, then hand the connection back (a deque, and a byte on
a socket pair to wake the selector). Who may stay connected, and for how
long, is :mod:`.connections`' table. So:

- connections are bounded (``max_connections``, oldest waiting one
  evicted), and so are threads (``threads``), whatever the number of
  clients;
- a new connection is read as soon as it is accepted, so a client that
  sends its request at once (every probe client) is answered even when a
  flood of reconnections gives each slot only milliseconds;
- the request line and headers must arrive within ``header_timeout`` (not
  reset by each byte); an idle keep-alive connection is closed after
  ``idle_timeout``; an answer not written within ``write_timeout`` closes
  the connection;
- headers are capped at ``max_header_bytes``, bodies at ``max_body_bytes``
  (:func:`.wsgi.complete`).
"""
from __future__ import annotations

import collections
import logging
import selectors
import socket
import threading
import time
from typing import Any

from kuryr_supervisor.cni import sockets
from kuryr_supervisor.health import wsgi
from kuryr_supervisor.health.answering import AnswerPool
from kuryr_supervisor.health.connections import Conn, Connections, Limits

__all__ = ["BoundedHTTPServer", "Limits", "listen", "serve"]

LOG = logging.getLogger(__name__)

_BACKLOG = 4096          # the kernel caps it at net.core.somaxconn
_ACCEPT_BATCH = 1024
_READ_CHUNK = 4096
_SWEEP_INTERVAL = 0.05
_DEFAULT_LIMITS = Limits()


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` for :class:`BoundedHTTPServer`
    (bound by the master), with a backlog deep enough for a reconnecting
    flood."""
    return sockets.bind_tcp(host, port, backlog=_BACKLOG)


class BoundedHTTPServer:
    """``app`` served on a listening socket within :class:`Limits`.

    The server works on its own duplicate of ``sock``: closing the server
    never closes the caller's (the master's, inherited) descriptor.
    """

    def __init__(self, app: Any, sock: socket.socket,
                 limits: Limits = _DEFAULT_LIMITS) -> None:
        self.app = app
        self.limits = limits
        self.socket = sock.dup()
        self.socket.setblocking(False)
        name = self.socket.getsockname()
        self.host = str(name[0])
        self.port = int(name[1])
        self._sel = selectors.DefaultSelector()
        # Only the selector thread changes the table (see its invariant).
        self._conns = Connections(limits, self._sel)
        self._returned: collections.deque[tuple[Conn, bool]] = \
            collections.deque()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._pool = AnswerPool(app, limits, (self.host, self.port),
                                self._answered)
        self._stopping = threading.Event()
        #: counters for drills and /status: connections closed by each limit
        self.stats = self._conns.stats
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name="probe-accept")

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> BoundedHTTPServer:
        for thread in (self._thread, *self._pool.threads):
            thread.start()
        return self

    def close(self) -> None:
        self._stopping.set()
        self._wake()
        self._pool.stop()
        for thread in (self._thread, *self._pool.threads):
            if thread.is_alive():
                thread.join(timeout=5)
        self._conns.close()
        self._sel.close()
        self.socket.close()
        self._wake_r.close()
        self._wake_w.close()

    @property
    def connections(self) -> int:
        """Open client connections (waiting for a request or being answered)."""
        return self._conns.count

    # -- selector thread ------------------------------------------------------
    def _loop(self) -> None:
        sel = self._sel
        sel.register(self.socket, selectors.EVENT_READ, None)
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        next_sweep = 0.0
        try:
            while not self._stopping.is_set():
                for key, _ in sel.select(timeout=_SWEEP_INTERVAL):
                    if key.fileobj is self.socket:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        self._drain_wake()
                    else:
                        self._read(key.data)
                self._take_back()
                now = time.monotonic()
                if now >= next_sweep:
                    self._conns.sweep(now)
                    next_sweep = now + _SWEEP_INTERVAL
        except Exception:  # noqa: BLE001 - logged; the worker's checks see it
            LOG.exception("probe server loop failed")

    def _accept(self) -> None:
        conns = self._conns
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, peer = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:      # EMFILE and friends: shed the oldest
                LOG.warning("probe server cannot accept: %s", exc)
                conns.evict()
                return
            if conns.at_limit:
                # Answers written during this batch still count as busy
                # until taken back: take them back before shedding anyone.
                self._take_back()
            if conns.at_limit and not conns.evict():
                sock.close()
                conns.stats["refused"] += 1
                continue
            # A probe sends its request right after connecting: read it now,
            # before later accepts can evict it, so under a connection flood
            # an honest client is answered however short a slot's life.
            self._read(conns.admit(sock, peer))
        conns.set_full(conns.at_limit)

    def _read(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(_READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._conns.drop(conn, "closed by client")
            return
        conn.buf += data
        self._maybe_dispatch(conn)

    def _maybe_dispatch(self, conn: Conn) -> None:
        try:
            ready = wsgi.complete(conn.buf, self.limits.max_header_bytes,
                                  self.limits.max_body_bytes)
        except wsgi.BadRequest:
            self._conns.drop(conn, "bad request")
            return
        if not ready:
            return
        self._conns.busy(conn)
        self._pool.submit(conn)

    def _take_back(self) -> None:
        """Connections whose answer was written: keep alive, or close."""
        while self._returned:
            conn, keep = self._returned.popleft()
            keep = keep and not self._stopping.is_set()
            if self._conns.answered(conn, keep) and conn.buf:
                self._maybe_dispatch(conn)   # a pipelined request already read
        self._conns.set_full(self._conns.at_limit)

    # -- hand-back from the pool threads --------------------------------------
    def _answered(self, conn: Conn, keep: bool) -> None:
        """``conn``'s answer is written (called on a pool thread)."""
        self._returned.append((conn, keep))
        self._wake()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(_READ_CHUNK):
                pass
        except OSError:
            pass


def serve(app: Any, sock: socket.socket,
          limits: Limits = _DEFAULT_LIMITS) -> BoundedHTTPServer:
    """Start serving ``app`` on the listening ``sock`` within ``limits``.

    The one place a listener of the HealthManager is served (probes, and any
    other endpoint that must stay up under a hostile local user).
    """
    return BoundedHTTPServer(app, sock, limits).start()
