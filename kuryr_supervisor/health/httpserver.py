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

Shape: one selector thread accepts connections and reads requests without
blocking; a complete request goes to a fixed pool of threads that run the
WSGI app (werkzeug's, unchanged) and write the answer. So:

- connections are bounded (``max_connections``): at the limit, the oldest
  connection that is not being answered is closed to make room, so a new
  client (the kubelet) always gets in and the attacker's oldest socket goes;
  a new connection is read as soon as it is accepted, so a client that
  sends its request at once (every probe client) is answered even when a
  flood of reconnections gives each slot only milliseconds;
- threads are bounded (``threads``), whatever the number of clients;
- the request line and headers must arrive within ``header_timeout`` of
  the connection's start (or of the end of its previous answer): the
  deadline is not reset by each byte;
- an idle keep-alive connection is closed after ``idle_timeout``;
- headers are capped at ``max_header_bytes``, bodies at ``max_body_bytes``;
- an answer that cannot be written within ``write_timeout`` closes the
  connection (a client that does not read cannot hold a pool thread).
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import selectors
import socket
import threading
import time
from typing import Any

from kuryr_supervisor.cni import sockets
from kuryr_supervisor.health import wsgi

LOG = logging.getLogger(__name__)

_BACKLOG = 4096          # the kernel caps it at net.core.somaxconn
_ACCEPT_BATCH = 1024
_READ_CHUNK = 4096
_SWEEP_INTERVAL = 0.05


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one listener may spend on its clients."""

    max_connections: int = 256
    threads: int = 4
    header_timeout: float = 2.0
    idle_timeout: float = 5.0
    write_timeout: float = 2.0
    max_header_bytes: int = 8192
    max_body_bytes: int = 65536


class _Conn:
    __slots__ = ("sock", "peer", "buf", "deadline", "served")

    def __init__(self, sock: socket.socket, peer: Any, deadline: float) -> None:
        self.sock = sock
        self.peer = peer
        self.buf = b""
        self.deadline = deadline
        self.served = 0


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
                 limits: Limits = Limits()) -> None:
        self.app = app
        self.limits = limits
        self.socket = sock.dup()
        self.socket.setblocking(False)
        name = self.socket.getsockname()
        self.host = str(name[0])
        self.port = int(name[1])
        # Only the selector thread touches these two.
        self._waiting: collections.OrderedDict[int, _Conn] = \
            collections.OrderedDict()
        self._busy = 0
        self._returned: collections.deque[tuple[_Conn, bool]] = \
            collections.deque()
        self._work: collections.deque[_Conn | None] = collections.deque()
        self._work_ready = threading.Semaphore(0)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stopping = threading.Event()
        self._full = False
        #: counters for drills and /status: connections closed by each limit
        self.stats = collections.Counter[str]()
        self._threads = [threading.Thread(target=self._loop, daemon=True,
                                          name="probe-accept")]
        self._threads += [threading.Thread(target=self._answer_loop,
                                           daemon=True, name=f"probe-{i}")
                          for i in range(limits.threads)]

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> BoundedHTTPServer:
        for thread in self._threads:
            thread.start()
        return self

    def close(self) -> None:
        self._stopping.set()
        self._wake()
        for _ in range(self.limits.threads):
            self._work.append(None)
            self._work_ready.release()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=5)
        for conn in list(self._waiting.values()):
            conn.sock.close()
        self._waiting.clear()
        self.socket.close()
        self._wake_r.close()
        self._wake_w.close()

    @property
    def connections(self) -> int:
        """Open client connections (waiting for a request or being answered)."""
        return len(self._waiting) + self._busy

    # -- selector thread ------------------------------------------------------
    def _loop(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.socket, selectors.EVENT_READ, None)
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        next_sweep = 0.0
        try:
            while not self._stopping.is_set():
                for key, _ in sel.select(timeout=_SWEEP_INTERVAL):
                    if key.fileobj is self.socket:
                        self._accept(sel)
                    elif key.fileobj is self._wake_r:
                        self._drain_wake()
                    else:
                        self._read(sel, key.data)
                self._take_back(sel)
                now = time.monotonic()
                if now >= next_sweep:
                    self._sweep(sel, now)
                    next_sweep = now + _SWEEP_INTERVAL
        except Exception:  # noqa: BLE001 - logged; the worker's checks see it
            LOG.exception("probe server loop failed")
        finally:
            sel.close()

    def _accept(self, sel: selectors.BaseSelector) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, peer = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:      # EMFILE and friends: shed the oldest
                LOG.warning("probe server cannot accept: %s", exc)
                self._evict(sel)
                return
            if self.connections >= self.limits.max_connections:
                # Answers written during this batch still count as busy
                # until taken back: take them back before shedding anyone.
                self._take_back(sel)
            if self.connections >= self.limits.max_connections \
                    and not self._evict(sel):
                sock.close()
                self.stats["refused"] += 1
                continue
            sock.setblocking(False)
            conn = _Conn(sock, peer,
                         time.monotonic() + self.limits.header_timeout)
            self._waiting[sock.fileno()] = conn
            sel.register(sock, selectors.EVENT_READ, conn)
            # A probe sends its request right after connecting: read it now,
            # before later accepts can evict it, so under a connection flood
            # an honest client is answered however short a slot's life.
            self._read(sel, conn)
        self._set_full(self.connections >= self.limits.max_connections)

    def _evict(self, sel: selectors.BaseSelector) -> bool:
        """Close the oldest connection not being answered; False if none."""
        if not self._waiting:
            return False
        _, oldest = self._waiting.popitem(last=False)
        self._drop(sel, oldest, "evicted", forget=False)
        self._set_full(True)
        return True

    def _set_full(self, full: bool) -> None:
        if full and not self._full:
            LOG.warning("probe server at its limit of %d connections: the "
                        "oldest idle or slow ones are being closed",
                        self.limits.max_connections)
        elif not full and self._full and \
                self.connections <= self.limits.max_connections // 2:
            LOG.info("probe server back below its connection limit")
        else:
            return
        self._full = full

    def _read(self, sel: selectors.BaseSelector, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(_READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(sel, conn, "closed by client")
            return
        conn.buf += data
        self._maybe_dispatch(sel, conn)

    def _maybe_dispatch(self, sel: selectors.BaseSelector, conn: _Conn) -> None:
        try:
            ready = wsgi.complete(conn.buf, self.limits.max_header_bytes,
                                  self.limits.max_body_bytes)
        except wsgi.BadRequest:
            self._drop(sel, conn, "bad request")
            return
        if not ready:
            return
        if conn.sock.fileno() in self._waiting:
            del self._waiting[conn.sock.fileno()]
            sel.unregister(conn.sock)
        self._busy += 1
        self._work.append(conn)
        self._work_ready.release()

    def _take_back(self, sel: selectors.BaseSelector) -> None:
        """Connections whose answer was written: keep alive, or close."""
        while self._returned:
            conn, keep = self._returned.popleft()
            self._busy -= 1
            if not keep or self._stopping.is_set():
                conn.sock.close()
                continue
            conn.deadline = time.monotonic() + (
                self.limits.header_timeout if conn.buf
                else self.limits.idle_timeout)
            self._waiting[conn.sock.fileno()] = conn
            sel.register(conn.sock, selectors.EVENT_READ, conn)
            if conn.buf:                 # a pipelined request already read
                self._maybe_dispatch(sel, conn)
        self._set_full(self.connections >= self.limits.max_connections)

    def _sweep(self, sel: selectors.BaseSelector, now: float) -> None:
        expired = [c for c in self._waiting.values() if c.deadline <= now]
        for conn in expired:
            why = "header timeout" if conn.buf or not conn.served \
                else "idle timeout"
            self._drop(sel, conn, why)
        if expired:
            self._set_full(self.connections >= self.limits.max_connections)

    def _drop(self, sel: selectors.BaseSelector, conn: _Conn, why: str, *,
              forget: bool = True) -> None:
        if forget:
            self._waiting.pop(conn.sock.fileno(), None)
        try:
            sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        self.stats[why] += 1
        conn.sock.close()

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

    # -- pool threads -------------------------------------------------------------
    def _answer_loop(self) -> None:
        while True:
            self._work_ready.acquire()
            conn = self._work.popleft()
            if conn is None:
                return
            keep = False
            try:
                keep = self._answer(conn)
            except Exception:  # noqa: BLE001 - one connection, not the server
                LOG.exception("probe request failed")
            self._returned.append((conn, keep))
            self._wake()

    def _answer(self, conn: _Conn) -> bool:
        request, conn.buf = wsgi.split(conn.buf)
        conn.served += 1
        response, keep = wsgi.respond(self.app, request, server=(
            self.host, self.port), peer=conn.peer)
        conn.sock.settimeout(self.limits.write_timeout)
        try:
            conn.sock.sendall(response)
        except OSError:
            return False
        finally:
            conn.sock.setblocking(False)
        return keep


def serve(app: Any, sock: socket.socket,
          limits: Limits = Limits()) -> BoundedHTTPServer:
    """Start serving ``app`` on the listening ``sock`` within ``limits``.

    The one place a listener of the HealthManager is served (probes, and any
    other endpoint that must stay up under a hostile local user).
    """
    return BoundedHTTPServer(app, sock, limits).start()
