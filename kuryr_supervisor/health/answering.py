"""The fixed pool of threads that answer complete requests for :mod:`.httpserver`.

Why a pool: the number of threads stays ``threads`` whatever the number of
clients, and no thread ever waits for a client to *send*: the selector
thread hands over only connections whose request is complete. A thread can
still wait for a client to *read*, so an answer that cannot be written
within ``write_timeout`` closes the connection (a client that does not read
cannot hold a pool thread).

Requests come in through a deque and a semaphore (no lock on the probe
path); each answered connection goes back through the ``done`` callback,
called on the pool thread, which must not block.
"""
from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any

from kuryr_supervisor.health import wsgi
from kuryr_supervisor.health.connections import Conn, Limits

LOG = logging.getLogger(__name__)


class AnswerPool:
    """``limits.threads`` threads running ``app`` for the connections handed
    over with :meth:`submit`, then calling ``done(conn, keep_alive)``;
    ``server`` is the listener's (host, port) as the app sees it."""

    def __init__(self, app: Any, limits: Limits, server: tuple[str, int],
                 done: Callable[[Conn, bool], None]) -> None:
        self.app = app
        self.limits = limits
        self.server = server
        self._done = done
        self._work: collections.deque[Conn | None] = collections.deque()
        self._work_ready = threading.Semaphore(0)
        self.threads = [threading.Thread(target=self._loop, daemon=True,
                                         name=f"probe-{i}")
                        for i in range(limits.threads)]

    def submit(self, conn: Conn) -> None:
        """Answer ``conn``'s first complete request (in ``conn.buf``)."""
        self._work.append(conn)
        self._work_ready.release()

    def stop(self) -> None:
        """Let every thread finish its answer and exit (not waited for)."""
        for _ in self.threads:
            self._work.append(None)
            self._work_ready.release()

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
            self._done(conn, keep)

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
