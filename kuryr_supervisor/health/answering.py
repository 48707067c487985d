"""The fixed pool of threads that answer complete requests for :mod:`.httpserver`.

Why a pool: the number of threads stays ``threads`` whatever the number of
clients, and no thread ever waits for a client to *send*: the selector
thread hands over only connections whose request is complete. A thread can
still wait for a client to *read*, so an answer that cannot be written
within ``write_timeout`` closes the connection (a client that does not read
cannot hold a pool thread).

Hand-over both ways is lock-free: requests come in through a deque and a
semaphore; answered connections go back through another deque, and a byte
on a socket pair wakes the selector thread (:attr:`AnswerPool.waker`) to
take them back.
"""
from __future__ import annotations

import collections
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

from kuryr_supervisor.health import wsgi
from kuryr_supervisor.health.connections import Conn, Limits

LOG = logging.getLogger(__name__)

_DRAIN_CHUNK = 4096


class AnswerPool:
    """``limits.threads`` threads running ``app`` for connections handed
    over with :meth:`submit`; ``server`` is the listener's (host, port) as
    the app sees it."""

    def __init__(self, app: Any, limits: Limits,
                 server: tuple[str, int]) -> None:
        self.app = app
        self.limits = limits
        self.server = server
        self._work: collections.deque[Conn | None] = collections.deque()
        self._work_ready = threading.Semaphore(0)
        self._returned: collections.deque[tuple[Conn, bool]] = \
            collections.deque()
        #: readable when answered connections wait in :meth:`answered`
        self.waker, self._wake_w = socket.socketpair()
        self.waker.setblocking(False)
        self._wake_w.setblocking(False)
        self.threads = [threading.Thread(target=self._loop, daemon=True,
                                         name=f"probe-{i}")
                        for i in range(limits.threads)]

    def submit(self, conn: Conn) -> None:
        """Answer ``conn``'s first complete request (in ``conn.buf``)."""
        self._work.append(conn)
        self._work_ready.release()

    def answered(self) -> Iterator[tuple[Conn, bool]]:
        """Connections whose answer was written, each with whether it may
        be kept alive; for the selector thread only."""
        while self._returned:
            yield self._returned.popleft()

    def wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass

    def drain_wake(self) -> None:
        try:
            while self.waker.recv(_DRAIN_CHUNK):
                pass
        except OSError:
            pass

    def stop(self) -> None:
        """Let every thread finish its answer and exit (not waited for)."""
        for _ in self.threads:
            self._work.append(None)
            self._work_ready.release()

    def close(self) -> None:
        self.waker.close()
        self._wake_w.close()

    def _loop(self) -> None:
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
            self.wake()

    def _answer(self, conn: Conn) -> bool:
        request, conn.buf = wsgi.split(conn.buf)
        conn.served += 1
        response, keep = wsgi.respond(self.app, request, server=self.server,
                                      peer=conn.peer)
        conn.sock.settimeout(self.limits.write_timeout)
        try:
            conn.sock.sendall(response)
        except OSError:
            return False
        finally:
            conn.sock.setblocking(False)
        return keep
