"""One SQLite file shared by processes that fork: connections and transactions.

The Server (ADD/DEL) and the Watcher (GC) open the same file from different
processes, each possibly from several threads. This module owns everything
about SQLite itself; :mod:`.store` owns what the rows mean.

Invariants:

* One ``BEGIN IMMEDIATE`` transaction per write: writers from every process
  are serialised by SQLite's lock (with a busy timeout), readers are not
  blocked (WAL).
* A connection never crosses a fork (SQLite forbids using one in a child
  and a copied one can corrupt the WAL): connections are opened lazily in
  the process that uses them, closed before any ``fork()`` and forgotten in
  the child, so a store may be built before cotyledon forks its workers.
* Every SQLite or OS failure leaves this module as a CNIError naming the
  file (:func:`classify`): ``StoreCorrupt`` or ``StoreUnwritable`` (faults
  of the node, not counted) or ``IpamStoreError`` (transient, counted).
* The database file is never memory-mapped (``mmap_size=0``), so a full or
  read-only file system fails a request, never the process (SIGBUS).
* A graceful stop leaves the file alone, without ``-wal`` or ``-shm``: the
  last connection to close checkpoints and deletes them, and the master,
  the last process of the daemon to exit, opens and closes one more
  (:func:`settle`) after every worker has stopped, whichever worker was
  cut off mid-use.
"""
from __future__ import annotations

import errno
import logging
import os
import pathlib
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

from kuryr_supervisor import errors

LOG = logging.getLogger(__name__)

BUSY_TIMEOUT = 10.0
"""Seconds to wait for another writer before failing with IpamStoreError."""


#: Brings a new connection's file to the schema this binary uses (runs in
#: a ``BEGIN IMMEDIATE`` transaction; raises a CNIError to refuse the file).
Prepare = Callable[[sqlite3.Connection, str], object]


class Database:
    """Lazily opened, fork-safe connection to the SQLite file ``path``."""

    def __init__(self, path: str, prepare: Prepare) -> None:
        self.path = path
        self._prepare = prepare
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._closed = False
        _DATABASES.add(self)

    def _connect(self) -> sqlite3.Connection:
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, mode=0o700, exist_ok=True)
        # Create the file 0600 ourselves; SQLite gives -wal/-shm its mode.
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT,
                               isolation_level=None, check_same_thread=False)
        try:
            # No memory map of the database file: a write fault on a mapped
            # page of a full or vanished file system is SIGBUS, which kills
            # the Server instead of failing one request. (The WAL index is
            # still mapped; SQLite writes every new page of it before
            # mapping it, so a full disk is SQLITE_IOERR/FULL there too.)
            conn.execute("PRAGMA mmap_size=0")
            # FULL: a committed allocation survives a power cut too, not
            # only a crash of the process (what NORMAL guarantees in WAL).
            conn.execute("PRAGMA synchronous=FULL")
            # The schema is checked and migrated in one transaction: the
            # file is at its old version or the current one, never between.
            # Before WAL is switched on, so a file this binary refuses (a
            # newer schema) is not changed at all.
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._prepare(conn, self.path)
            except BaseException as exc:
                conn.execute("ROLLBACK")
                if isinstance(exc, (errors.CNIError, sqlite3.Error, OSError)) \
                        or not isinstance(exc, Exception):
                    raise
                # A file the schema code cannot make sense of is a store
                # this daemon cannot use: a fault of the node, not counted.
                raise errors.StoreCorrupt(
                    f"IPAM store {self.path} cannot be opened: "
                    f"{errors.describe(exc)}") from exc
            conn.execute("COMMIT")
            conn.execute("PRAGMA journal_mode=WAL")
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def transaction(self, write: bool = True, *,
                    fsync: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction under the thread lock; BEGIN failures mapped.

        Writers take the write lock up front (IMMEDIATE) so two processes
        never both read the free set and then race to insert.
        ``fsync=False``: this commit survives a crash of any process but
        not necessarily a power cut (``synchronous=NORMAL`` for it alone);
        the next ordinary commit makes it durable too, the WAL being
        written in order.
        """
        with self._lock:
            if self._closed:
                raise errors.IpamStoreError(
                    f"IPAM store {self.path} is closed (shutting down)")
            try:
                if self._conn is None or self._pid != os.getpid():
                    self._conn = self._connect()
                    self._pid = os.getpid()
                conn = self._conn
                if not fsync:
                    conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except (sqlite3.Error, OSError) as exc:
                if not fsync and self._conn is not None:
                    with suppress(sqlite3.Error):
                        self._conn.execute("PRAGMA synchronous=FULL")
                raise classify(exc, f"IPAM store {self.path} unusable"
                               ) from exc
            try:
                yield from self._run(conn)
            finally:
                if not fsync:
                    with suppress(sqlite3.Error):
                        conn.execute("PRAGMA synchronous=FULL")

    def _run(self, conn: sqlite3.Connection
             ) -> Iterator[sqlite3.Connection]:
        """The body of :meth:`transaction` once BEGIN succeeded."""
        try:
            yield conn
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                LOG.exception("IPAM rollback failed")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise classify(exc, f"IPAM store {self.path}: commit failed"
                           ) from exc

    def query(self, sql: str, *args: object,
              write: bool = False) -> list[tuple]:  # type: ignore[type-arg]
        """Rows of one statement run in its own transaction."""
        try:
            with self.transaction(write) as conn:
                return conn.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise classify(exc, f"IPAM store {self.path}") from exc

    def verify(self) -> None:
        """SQLite's own integrity check of the file (start-up and watch);
        raises the classified error when the store cannot be trusted."""
        rows = self.query("PRAGMA quick_check")
        verdict = "; ".join(str(r[0]) for r in rows[:3])
        if verdict != "ok":
            raise errors.StoreCorrupt(f"IPAM store {self.path} failed its "
                                      f"integrity check: {verdict}")

    def close(self, *, final: bool = False) -> None:
        """Close this process's connection (the next use opens another).

        ``final`` (a graceful stop): first checkpoint the write-ahead log
        into the file and truncate it, then refuse any later use in this
        process, so no thread reopens the store after it was closed. The
        last connection to close deletes ``-wal`` and ``-shm``.
        """
        with self._lock:
            if final:
                self._closed = True
                if self._conn is not None and self._pid == os.getpid():
                    try:
                        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    except sqlite3.Error as exc:   # busy: SQLite retries at close
                        LOG.warning("IPAM store %s: checkpoint at close "
                                    "failed: %s", self.path, exc)
            self._close_locked()

    def _close_locked(self) -> None:
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None

    def before_fork(self) -> None:
        """The process forks (this module's ``os.register_at_fork`` hook)."""
        # Never block a fork for long: a database busy past the timeout keeps
        # its connection, and the child forgets it (after_fork_in_child).
        if self._lock.acquire(timeout=BUSY_TIMEOUT):
            try:
                self._close_locked()
            finally:
                self._lock.release()

    def after_fork_in_child(self) -> None:
        """In the child of a fork: the parent's connection is not ours."""
        if self._conn is not None:
            _ORPHANS.append(self._conn)  # never closed, never used
        self._conn = None
        self._lock = threading.Lock()


def open_existing(path: str, timeout: float = 1.0) -> sqlite3.Connection | None:
    """A connection to the file at ``path`` if it exists (never creates it),
    or None; not memory-mapped.

    Read-write (``mode=rw``), not ``mode=ro``: a read-only connection cannot
    checkpoint, so when it is the last one to close it leaves ``-wal`` and
    ``-shm`` behind. Callers that only read say ``PRAGMA query_only``.
    """
    uri = f"{pathlib.Path(path).absolute().as_uri()}?mode=rw"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=timeout)
        conn.execute("PRAGMA mmap_size = 0")
    except sqlite3.Error:
        return None
    return conn


def settle(path: str) -> None:
    """Checkpoint the SQLite file at ``path`` and close it, as its last user.

    The master calls this once every worker has stopped, for the IPAM store
    and the pod registry. A worker ended while it used one (cotyledon ends
    a worker's threads with its process) closed nothing: the HealthManager
    sampling the store during its drain, after the Server's final close,
    or the Watcher and the Server, which never close the registry. Opened
    alone, this connection is the last one: closing it deletes ``-wal``
    and ``-shm``. Never raises; a file that does not exist is left alone.
    """
    conn = open_existing(path)
    if conn is None:
        return
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.Error as exc:
        LOG.warning("%s: checkpoint at exit failed: %s", path, exc)
    finally:
        conn.close()


# SQLite primary result codes (sqlite3.h) and errnos that no retry fixes.
_CORRUPT = frozenset({11, 26})            # SQLITE_CORRUPT, SQLITE_NOTADB
_UNWRITABLE = frozenset({8, 13, 14})      # SQLITE_READONLY, _FULL, _CANTOPEN
_UNWRITABLE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS,
                                errno.EACCES, errno.EPERM})


def classify(exc: BaseException, what: str) -> errors.CNIError:
    """The error a store failure leaves this module as: a persistent
    environment fault (corrupt; full, read-only or forbidden) or a
    transient internal one (busy, I/O), which counts against the budget."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    message = f"{what}: {exc}"
    if primary in _CORRUPT:
        return errors.StoreCorrupt(message)
    if primary in _UNWRITABLE or (isinstance(exc, OSError)
                                  and exc.errno in _UNWRITABLE_ERRNOS):
        return errors.StoreUnwritable(message)
    return errors.IpamStoreError(message)


_DATABASES: weakref.WeakSet[Database] = weakref.WeakSet()
_ORPHANS: list[sqlite3.Connection] = []


def _before_fork() -> None:
    for database in list(_DATABASES):
        database.before_fork()


def _after_fork_in_child() -> None:
    for database in list(_DATABASES):
        database.after_fork_in_child()


os.register_at_fork(before=_before_fork,
                    after_in_child=_after_fork_in_child)
