"""Host-local IPAM kept crash-safe in SQLite.

The Server (ADD/DEL) and the Watcher (GC) open the same file from different
processes, each possibly from several threads.

Invariants:

* The allocation row *is* the reservation: an address is handed out only by
  the transaction that inserts its row, and the ``address`` column is
  UNIQUE, so no address is handed out twice, even if a process is killed at
  any instant (SQLite rolls an unfinished transaction back on next open).
* One ``BEGIN IMMEDIATE`` transaction per allocation or release: writers
  from every process are serialised by SQLite's lock (with a busy timeout),
  readers are not blocked (WAL).
* The network, broadcast and gateway addresses are never handed out.
* Host-local order: the search starts after the last address handed out in
  this range (a cursor kept in the same file), so a just-freed address is
  not reused at once and a late packet to it does not reach a new pod.
* A connection never crosses a fork (SQLite forbids using one in a child
  and a copied one can corrupt the WAL): connections are opened lazily in
  the process that uses them, closed before any ``fork()`` and forgotten in
  the child, so a store may be built before cotyledon forks its workers.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from kuryr_supervisor import errors

LOG = logging.getLogger(__name__)

BUSY_TIMEOUT = 10.0
"""Seconds to wait for another writer before failing with IpamStoreError."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS allocations (
    container_id  TEXT NOT NULL,
    ifname        TEXT NOT NULL,
    address       INTEGER NOT NULL UNIQUE,
    prefixlen     INTEGER NOT NULL,
    gateway       TEXT NOT NULL,
    netns         TEXT NOT NULL,
    pod_namespace TEXT NOT NULL,
    pod_name      TEXT NOT NULL,
    pod_uid       TEXT NOT NULL,
    created       REAL NOT NULL,
    PRIMARY KEY (container_id, ifname)
);
CREATE TABLE IF NOT EXISTS cursors (
    range TEXT PRIMARY KEY,
    last  INTEGER NOT NULL
);
"""
_COLUMNS = ("container_id, ifname, address, prefixlen, gateway, netns, "
            "pod_namespace, pod_name, pod_uid, created")


@dataclasses.dataclass(frozen=True)
class PodRef:
    """The pod from CNI_ARGS (K8S_POD_NAMESPACE/NAME/UID; "" when absent)."""

    namespace: str
    name: str
    uid: str


@dataclasses.dataclass(frozen=True)
class Allocation:
    container_id: str
    ifname: str
    address: ipaddress.IPv4Interface
    gateway: ipaddress.IPv4Address
    netns: str
    pod: PodRef
    created: float


def _row_to_allocation(row: tuple) -> Allocation:  # type: ignore[type-arg]
    (cid, ifname, addr, plen, gw, netns, pns, pname, puid, created) = row
    ip = ipaddress.IPv4Address(addr)
    return Allocation(container_id=cid, ifname=ifname,
                      address=ipaddress.IPv4Interface(f"{ip}/{plen}"),
                      gateway=ipaddress.IPv4Address(gw), netns=netns,
                      pod=PodRef(pns, pname, puid), created=created)


class IpamStore:
    """Allocations from one subnet, persisted in the SQLite file ``path``."""

    def __init__(self, path: str, subnet: ipaddress.IPv4Network, *,
                 gateway: ipaddress.IPv4Address | None = None,
                 range_start: ipaddress.IPv4Address | None = None,
                 range_end: ipaddress.IPv4Address | None = None) -> None:
        if subnet.prefixlen > 30:
            raise ValueError(f"subnet {subnet} is too small (max /30)")
        first, last = subnet.network_address + 1, subnet.broadcast_address - 1
        self.subnet = subnet
        self.gateway = gateway if gateway is not None else first
        self.range_start = range_start if range_start is not None else first
        self.range_end = range_end if range_end is not None else last
        for what, ip in (("gateway", self.gateway),
                         ("range_start", self.range_start),
                         ("range_end", self.range_end)):
            if not first <= ip <= last:
                raise ValueError(f"{what} {ip} is not a host of {subnet}")
        if self.range_start > self.range_end:
            raise ValueError(f"range_start {self.range_start} is after "
                             f"range_end {self.range_end}")
        self.path = path
        self._range_key = f"{self.range_start}-{self.range_end}"
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        _STORES.add(self)
        with self._transaction():  # fail early on a bad path or a bad file
            pass
        self.close()

    def _connect(self) -> sqlite3.Connection:
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, mode=0o700, exist_ok=True)
        # Create the file 0600 ourselves; SQLite gives -wal/-shm its mode.
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT,
                               isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            # FULL: a committed allocation survives a power cut too, not
            # only a crash of the process (what NORMAL guarantees in WAL).
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(_SCHEMA)
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def _transaction(self, write: bool = True
                     ) -> Iterator[sqlite3.Connection]:
        """One transaction under the thread lock; BEGIN failures mapped.

        Writers take the write lock up front (IMMEDIATE) so two processes
        never both read the free set and then race to insert.
        """
        with self._lock:
            try:
                if self._conn is None or self._pid != os.getpid():
                    self._conn = self._connect()
                    self._pid = os.getpid()
                conn = self._conn
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except (sqlite3.Error, OSError) as exc:
                raise errors.IpamStoreError(
                    f"IPAM store {self.path} unusable: {exc}") from exc
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
                raise errors.IpamStoreError(
                    f"IPAM store {self.path}: commit failed: {exc}") from exc

    def _query(self, sql: str, *args: object,
               write: bool = False) -> list[tuple]:  # type: ignore[type-arg]
        try:
            with self._transaction(write) as conn:
                return conn.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise errors.IpamStoreError(
                f"IPAM store {self.path}: {exc}") from exc

    def allocate(self, container_id: str, ifname: str, *, netns: str,
                 pod: PodRef) -> Allocation:
        """Reserve the next free address after the last one handed out."""
        start, end = int(self.range_start), int(self.range_end)
        reserved = {int(self.gateway)}
        try:
            with self._transaction() as conn:
                if conn.execute(
                        "SELECT 1 FROM allocations WHERE container_id = ? "
                        "AND ifname = ?", (container_id, ifname)).fetchone():
                    raise errors.AlreadyExists(
                        f"{container_id}/{ifname} already has an address")
                used = reserved | {a for (a,) in conn.execute(
                    "SELECT address FROM allocations WHERE address "
                    "BETWEEN ? AND ?", (start, end))}
                row = conn.execute("SELECT last FROM cursors WHERE range = ?",
                                   (self._range_key,)).fetchone()
                address = _next_free(start, end, row[0] if row else end, used)
                if address is None:
                    raise errors.AddressExhausted(
                        f"no free address in {self.range_start}-"
                        f"{self.range_end} of {self.subnet}")
                created = time.time()
                conn.execute(
                    f"INSERT INTO allocations ({_COLUMNS}) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (container_id, ifname, address, self.subnet.prefixlen,
                     str(self.gateway), netns, pod.namespace, pod.name,
                     pod.uid, created))
                conn.execute("INSERT OR REPLACE INTO cursors (range, last) "
                             "VALUES (?, ?)", (self._range_key, address))
        except sqlite3.IntegrityError as exc:
            raise errors.AlreadyExists(
                f"{container_id}/{ifname} already has an address") from exc
        except sqlite3.Error as exc:
            raise errors.IpamStoreError(
                f"IPAM store {self.path}: allocate failed: {exc}") from exc
        allocation = Allocation(
            container_id=container_id, ifname=ifname,
            address=ipaddress.IPv4Interface(
                f"{ipaddress.IPv4Address(address)}/{self.subnet.prefixlen}"),
            gateway=self.gateway, netns=netns, pod=pod, created=created)
        LOG.debug("allocated %s to %s/%s", allocation.address, container_id,
                  ifname)
        return allocation

    def release(self, container_id: str, ifname: str) -> Allocation | None:
        """Free the address of (container_id, ifname); None if it had none."""
        rows = self._query(
            f"DELETE FROM allocations WHERE container_id = ? AND ifname = ? "
            f"RETURNING {_COLUMNS}", container_id, ifname, write=True)
        if not rows:
            return None
        allocation = _row_to_allocation(rows[0])
        LOG.debug("released %s of %s/%s", allocation.address, container_id,
                  ifname)
        return allocation

    def get(self, container_id: str, ifname: str) -> Allocation | None:
        rows = self._query(
            f"SELECT {_COLUMNS} FROM allocations WHERE container_id = ? "
            "AND ifname = ?", container_id, ifname)
        return _row_to_allocation(rows[0]) if rows else None

    def list(self) -> list[Allocation]:
        """Every allocation, oldest first (including ones of other subnets)."""
        rows = self._query(
            f"SELECT {_COLUMNS} FROM allocations ORDER BY created")
        return [_row_to_allocation(row) for row in rows]

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None

    def _before_fork(self) -> None:
        # Never block a fork for long: a store busy past the timeout keeps
        # its connection, and the child forgets it (_after_fork_in_child).
        if self._lock.acquire(timeout=BUSY_TIMEOUT):
            try:
                self._close_locked()
            finally:
                self._lock.release()

    def _after_fork_in_child(self) -> None:
        if self._conn is not None:
            _ORPHANS.append(self._conn)  # never closed, never used
        self._conn = None
        self._lock = threading.Lock()


_STORES: weakref.WeakSet[IpamStore] = weakref.WeakSet()
_ORPHANS: list[sqlite3.Connection] = []


def _before_fork() -> None:
    for store in list(_STORES):
        store._before_fork()


def _after_fork_in_child() -> None:
    for store in list(_STORES):
        store._after_fork_in_child()


os.register_at_fork(before=_before_fork,
                    after_in_child=_after_fork_in_child)


def _next_free(start: int, end: int, last: int, used: set[int]) -> int | None:
    """First address after ``last`` (wrapping within start..end) not used."""
    size = end - start + 1
    first = last + 1 if start <= last < end else start
    for step in range(size):
        candidate = start + (first - start + step) % size
        if candidate not in used:
            return candidate
    return None
