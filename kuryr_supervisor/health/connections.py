"""The client connections of one bounded listener, and the limits on them.

This is the policy half of :mod:`.httpserver`: what a client may hold and
for how long. The server's selector thread decides *when* to read, accept
or answer; this table decides *who stays*:

- connections are bounded (``max_connections``): at the limit, the oldest
  connection that is not being answered is closed to make room
  (:meth:`Connections.evict`), so a new client (the kubelet) always gets in
  and the attacker's oldest socket goes;
- the request line and headers must arrive within ``header_timeout`` of
  the connection's start (or of the end of its previous answer): the
  deadline is set once, never reset by each byte;
- an idle keep-alive connection is closed after ``idle_timeout``.

Invariant: a connection is in the waiting table exactly when it is
registered for reading in the selector; one being answered is in neither
and is only counted (``busy``). Only the selector thread calls the
mutating methods; :attr:`Connections.count` and :attr:`Connections.stats`
may be read from anywhere.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import selectors
import socket
import time
from typing import Any

LOG = logging.getLogger(__name__)


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


class Conn:
    """One client connection: its socket, the bytes read and not yet
    answered, the deadline of what it is waiting for, and how many
    requests it has had answered."""

    __slots__ = ("sock", "peer", "buf", "deadline", "served")

    def __init__(self, sock: socket.socket, peer: Any, deadline: float) -> None:
        self.sock = sock
        self.peer = peer
        self.buf = b""
        self.deadline = deadline
        self.served = 0


class Connections:
    """The waiting and busy connections of one listener within
    :class:`Limits`, registered in the listener's selector ``sel``."""

    def __init__(self, limits: Limits, sel: selectors.BaseSelector) -> None:
        self.limits = limits
        self._sel = sel
        self._waiting: collections.OrderedDict[int, Conn] = \
            collections.OrderedDict()
        self._busy = 0
        self._full = False
        #: counters for drills and /status: connections closed by each limit
        self.stats = collections.Counter[str]()

    @property
    def count(self) -> int:
        """Open client connections (waiting for a request or being answered)."""
        return len(self._waiting) + self._busy

    @property
    def at_limit(self) -> bool:
        # not via count: this is read a few times per accepted connection
        return len(self._waiting) + self._busy >= self.limits.max_connections

    def admit(self, sock: socket.socket, peer: Any) -> Conn:
        """A newly accepted connection: its request line and headers are due
        within ``header_timeout``."""
        sock.setblocking(False)
        conn = Conn(sock, peer, time.monotonic() + self.limits.header_timeout)
        self._waiting[sock.fileno()] = conn
        self._sel.register(sock, selectors.EVENT_READ, conn)
        return conn

    def busy(self, conn: Conn) -> None:
        """``conn`` has a complete request: out of the selector until it is
        answered (and out of reach of eviction and deadlines)."""
        if conn.sock.fileno() in self._waiting:
            del self._waiting[conn.sock.fileno()]
            self._sel.unregister(conn.sock)
        self._busy += 1

    def answered(self, conn: Conn, keep: bool) -> bool:
        """``conn``'s answer was written: wait for its next request if
        ``keep`` (an idle one within ``idle_timeout``, one already started
        within ``header_timeout``), else close it. True if kept."""
        self._busy -= 1
        if not keep:
            conn.sock.close()
            return False
        conn.deadline = time.monotonic() + (
            self.limits.header_timeout if conn.buf
            else self.limits.idle_timeout)
        self._waiting[conn.sock.fileno()] = conn
        self._sel.register(conn.sock, selectors.EVENT_READ, conn)
        return True

    def evict(self) -> bool:
        """Close the oldest connection not being answered; False if none."""
        if not self._waiting:
            return False
        _, oldest = self._waiting.popitem(last=False)
        self.drop(oldest, "evicted", forget=False)
        self.set_full(True)
        return True

    def sweep(self, now: float) -> None:
        """Close the waiting connections whose deadline has passed."""
        expired = [c for c in self._waiting.values() if c.deadline <= now]
        for conn in expired:
            why = "header timeout" if conn.buf or not conn.served \
                else "idle timeout"
            self.drop(conn, why)
        if expired:
            self.set_full(self.at_limit)

    def drop(self, conn: Conn, why: str, *, forget: bool = True) -> None:
        """Close ``conn``, counting ``why`` in :attr:`stats`."""
        if forget:
            self._waiting.pop(conn.sock.fileno(), None)
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        self.stats[why] += 1
        conn.sock.close()

    def set_full(self, full: bool) -> None:
        """Log once when the limit is reached, once when well below it."""
        if full and not self._full:
            LOG.warning("probe server at its limit of %d connections: the "
                        "oldest idle or slow ones are being closed",
                        self.limits.max_connections)
        elif not full and self._full and \
                self.count <= self.limits.max_connections // 2:
            LOG.info("probe server back below its connection limit")
        else:
            return
        self._full = full

    def close(self) -> None:
        """Close every waiting connection (the server is stopping)."""
        for conn in list(self._waiting.values()):
            conn.sock.close()
        self._waiting.clear()
