"""One held connection to an OVSDB database, with a monitor kept current.

:class:`Connection` is opened by the process that uses it, at its first
use (a worker after its fork: nothing here is ever shared across a fork; a
copy inherited anyway is dropped, never used), and kept: a thread of its
own connects, asks for the monitor (``monitor_cond``: only the rows and
columns of its :class:`~.rows.Table` list) and, when the connection is
lost, connects again with a jittered backoff (:data:`BACKOFF_FIRST`
doubling to :data:`BACKOFF_MAX`), the monitor's rows then replaced whole.

Invariants:

* Every call is bounded by ``timeout`` seconds, connecting included: a
  database that does not answer (a stopped ovsdb-server still accepts)
  raises :class:`OvsdbUnavailable` ("no answer within N s"); one that is
  unreachable raises it at once with the last connect error while the
  backoff runs. A transaction that timed out may still commit later.
* Failures leave as :class:`OvsdbUnavailable` (unreachable, hung, the
  connection lost) or :class:`OvsdbError` (the database refused the
  transaction); callers map them to CNI errors.
* :meth:`Connection.wait_for` waits on the monitor's rows, woken by each
  update (no polling); :meth:`Connection.read` reads them under the lock.
"""
from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kuryr_supervisor.cni.ovsdb import wire
from kuryr_supervisor.cni.ovsdb.rows import Replica, Table

LOG = logging.getLogger(__name__)

BACKOFF_FIRST = 0.1
BACKOFF_MAX = 5.0
_MONITOR_ID = "kuryr-supervisor"

T = TypeVar("T")


class OvsdbError(Exception):
    """The database refused the transaction (a constraint, a name), or
    the adapter was misused."""


class OvsdbUnavailable(OvsdbError):
    """ovsdb-server did not answer within the timeout, or is unreachable."""


class Connection:
    """See the module docstring. ``database`` is the schema's name
    (``Open_vSwitch``); ``tables`` what the monitor covers."""

    def __init__(self, remote: str, database: str, tables: tuple[Table, ...],
                 *, timeout: float = 5.0,
                 connect: Callable[[str, float], Any] = wire.connect,
                 rng: random.Random | None = None) -> None:
        self.remote = remote
        self.database = database
        self.tables = tables
        self.timeout = timeout
        self._connect = connect
        self._rng = rng or random.Random()
        self._pid = -1
        self._fresh()

    def _fresh(self) -> None:
        """State for this process (first use, or a child after a fork)."""
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._replica = Replica(self.tables)
        self._channel: wire.Channel | None = None
        self._synced = False
        self._error: str | None = None
        self._refused: str | None = None
        self._keeper: threading.Thread | None = None
        self._stop = threading.Event()       # the running keeper's

    def _mine(self) -> None:
        if self._pid != os.getpid():
            inherited = getattr(self, "_channel", None)
            if inherited is not None:
                inherited.abandon()
            self._fresh()

    # -- calls -------------------------------------------------------------------
    def transact(self, *ops: dict[str, Any],
                 timeout: float | None = None) -> list[Any]:
        """One transaction; the results of ``ops`` (OvsdbError naming the
        first operation refused)."""
        return self.begin(*ops, timeout=timeout)()

    def begin(self, *ops: dict[str, Any], timeout: float | None = None
              ) -> Callable[[], list[Any]]:
        """Send one transaction now; call what is returned for its results
        (as :meth:`transact`), e.g. once other work is done meanwhile. The
        whole, sending included, is bounded by ``timeout``."""
        seconds = self.timeout if timeout is None else timeout
        end = time.monotonic() + seconds
        try:
            reply = self._ready(end, seconds).send(
                "transact", [self.database, *ops])
        except wire.WireError as exc:
            raise OvsdbUnavailable(f"OVSDB {self.remote}: {exc}") from exc

        def results() -> list[Any]:
            try:
                answer = reply.result(max(0.001, end - time.monotonic()))
            except wire.NoAnswer as exc:
                raise self._no_answer(seconds) from exc
            except wire.WireError as exc:
                raise OvsdbUnavailable(f"OVSDB {self.remote}: {exc}") from exc
            except wire.RpcError as exc:
                raise OvsdbError(f"OVSDB {self.remote} refused: {exc}") \
                    from exc
            return _checked(ops, answer)
        return results

    def wait_for(self, found: Callable[[Replica], T | None],
                 timeout: float) -> T | None:
        """``found(rows)`` once it is not None (re-asked at every update
        of the monitor), or None after ``timeout`` seconds."""
        end = time.monotonic() + timeout
        self._start()
        with self._cond:
            while True:
                if self._synced:
                    value = found(self._replica)
                    if value is not None:
                        return value
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def read(self, look: Callable[[Replica], T],
             timeout: float | None = None) -> T:
        """``look(rows)`` on the monitor's rows once they are current
        (OvsdbUnavailable when they cannot be within ``timeout``)."""
        seconds = self.timeout if timeout is None else timeout
        self._ready(time.monotonic() + seconds, seconds)
        with self._cond:
            return look(self._replica)

    def state(self) -> tuple[bool, str]:
        """(connected and its rows current, the last error or "")."""
        self._mine()
        with self._cond:
            return self._synced, self._error or ""

    def close(self) -> None:
        """Disconnect (the keeper ends); a later call connects again."""
        self._mine()
        with self._cond:
            self._stop.set()
            self._keeper = None
            channel, self._channel = self._channel, None
            self._synced = False
            self._error = self._refused = None
            self._cond.notify_all()
        if channel is not None:
            channel.close("closed by its owner")

    # -- the keeper --------------------------------------------------------------
    def _start(self) -> None:
        self._mine()
        with self._cond:
            if self._keeper is None:
                self._stop = threading.Event()
                self._keeper = threading.Thread(
                    target=self._keep, args=(self._stop,),
                    name="ovsdb-keeper", daemon=True)
                self._keeper.start()

    def _ready(self, end: float, seconds: float) -> wire.Channel:
        """The channel once connected and synced, within ``end``."""
        self._start()
        with self._cond:
            while not self._synced:
                if self._refused is not None:
                    # The last attempt failed: say why now, not at the
                    # end of the wait (the backoff runs meanwhile).
                    raise OvsdbUnavailable(
                        f"OVSDB {self.remote}: {self._refused}")
                left = end - time.monotonic()
                if left <= 0:
                    raise self._no_answer(seconds)
                self._cond.wait(left)
            assert self._channel is not None
            return self._channel

    def _no_answer(self, seconds: float) -> OvsdbUnavailable:
        return OvsdbUnavailable(f"OVSDB {self.remote}: no answer within "
                                f"{seconds:g} s")

    def _keep(self, stop: threading.Event) -> None:
        delay = BACKOFF_FIRST
        while not stop.is_set():
            lost = threading.Event()
            try:
                if not self._open(lost, stop):
                    return
                delay = BACKOFF_FIRST
                lost.wait()
            except (wire.WireError, wire.RpcError) as exc:
                self._failed(str(exc), stop)
            stop.wait(self._rng.uniform(delay / 2, delay))
            delay = min(BACKOFF_MAX, delay * 2)

    def _open(self, lost: threading.Event, stop: threading.Event) -> bool:
        """Connect and monitor; False when closed meanwhile."""
        sock = self._connect(self.remote, self.timeout)
        channel = wire.Channel(sock, self.remote, on_notify=self._notify,
                               on_close=lambda why: self._lost(why, lost,
                                                               stop))
        try:
            monitored = channel.call(
                "monitor_cond", [self.database, _MONITOR_ID,
                                 {t.name: [t.request()] for t in self.tables}],
                self.timeout)
        except (wire.WireError, wire.RpcError):
            channel.close("monitor request failed")
            raise
        with self._cond:
            if stop.is_set():
                channel.close("closed by its owner")
                return False
            if channel.closed is not None:
                raise wire.ChannelClosed(f"{self.remote}: {channel.closed}")
            self._replica.reset(monitored or {})
            self._channel, self._synced = channel, True
            if self._error is not None:
                LOG.info("OVSDB %s: connected again", self.remote)
            self._error = self._refused = None
            self._cond.notify_all()
        return True

    def _failed(self, why: str, stop: threading.Event) -> None:
        with self._cond:
            if stop.is_set():
                return
            if self._error != why:
                LOG.warning("OVSDB %s: %s (retrying with backoff)",
                            self.remote, why)
            self._error = self._refused = why
            self._cond.notify_all()

    def _lost(self, why: str, lost: threading.Event,
              stop: threading.Event) -> None:
        lost.set()
        with self._cond:
            if stop.is_set():
                return
            self._synced = False
            self._channel = None
            self._error = f"connection lost: {why}"
            LOG.warning("OVSDB %s: connection lost (%s), reconnecting",
                        self.remote, why)
            self._cond.notify_all()

    def _notify(self, method: str, params: Any) -> None:
        if method != "update2" or not isinstance(params, list) \
                or len(params) != 2:
            return
        with self._cond:
            self._replica.apply(params[1] or {})
            self._cond.notify_all()


def _checked(ops: tuple[dict[str, Any], ...], results: Any) -> list[Any]:
    """The transaction's results, or OvsdbError naming what was refused."""
    if not isinstance(results, list):
        raise OvsdbError(f"unexpected transact answer {results!r}")
    for at, result in enumerate(results):
        if isinstance(result, dict) and "error" in result:
            op = ops[at]["op"] if at < len(ops) else "commit"
            table = ops[at].get("table", "") if at < len(ops) else ""
            details = result.get("details", "")
            raise OvsdbError(" ".join(filter(None, (
                f"{op} {table}".strip() + ":", str(result["error"]),
                f"({details})" if details else ""))))
    return results
