"""The allocation store's schema, its version and its forward migrations.

The version is SQLite's ``PRAGMA user_version`` (four bytes of the file's
header, written in the same transaction as the tables). Versions:

* **0** -- the schema before versioning: ``allocations`` (who holds which
  address) and ``cursors``. SQLite reports 0 for any file that never set a
  version, so 0 with no ``allocations`` table is simply a new file.
* **1** -- replayable ADD: each allocation has a ``state`` (``pending`` from
  the allocating transaction until the pod is plumbed, then ``plumbed``), the
  digest of the netconf that made it and the plumbing facts the result is
  rendered from (host ifname, host MAC, pod MAC, MTU). Rows migrated from 0
  are ``plumbed`` with no digest: attachments an older daemon made, kept and
  released by DEL as before, never replayed (there is nothing to replay).

Invariants:

* :func:`migrate` runs in the caller's ``BEGIN IMMEDIATE`` transaction: a
  store is at its old version or at :data:`CURRENT`, never in between.
* A store newer than :data:`CURRENT`, or below 0 (no release writes that),
  is never written: :func:`check_schema` (the master, before any worker
  forks) reads its version without SQLite when it can (the header bytes)
  and through SQLite otherwise (so a version only in the write-ahead log
  counts), and raises :class:`SchemaOutOfRange` (:class:`SchemaTooNew`
  when newer) naming the version; a worker that opens such a store gets
  the same error, a store fault (readiness), never a counted ADD failure.
* A store at a known version that lacks a table or column is damaged:
  :class:`errors.StoreCorrupt`, a persistent fault of the node, like a file
  SQLite itself finds corrupt.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import sqlite3
import tempfile

from kuryr_supervisor import errors

CURRENT = 1
"""The newest schema version this binary reads and writes."""

_V0 = (
    """CREATE TABLE IF NOT EXISTS allocations (
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
)""",
    """CREATE TABLE IF NOT EXISTS cursors (
    range TEXT PRIMARY KEY,
    last  INTEGER NOT NULL
)""",
)

#: Statements that take a store from version ``n - 1`` to ``n``.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        # An older daemon's rows are finished attachments (it answered them
        # or its DEL/GC/reclaim will): 'plumbed', with no netconf digest.
        "ALTER TABLE allocations ADD COLUMN state TEXT NOT NULL "
        "DEFAULT 'plumbed'",
        "ALTER TABLE allocations ADD COLUMN netconf TEXT",
        "ALTER TABLE allocations ADD COLUMN host_ifname TEXT",
        "ALTER TABLE allocations ADD COLUMN host_mac TEXT",
        "ALTER TABLE allocations ADD COLUMN pod_mac TEXT",
        "ALTER TABLE allocations ADD COLUMN mtu INTEGER",
    ),
}

#: What a store at :data:`CURRENT` must have (checked at every open).
EXPECTED: dict[str, frozenset[str]] = {
    "allocations": frozenset({
        "container_id", "ifname", "address", "prefixlen", "gateway", "netns",
        "pod_namespace", "pod_name", "pod_uid", "created", "state",
        "netconf", "host_ifname", "host_mac", "pod_mac", "mtu"}),
    "cursors": frozenset({"range", "last"}),
}

_HEADER = b"SQLite format 3\x00"
_USER_VERSION_OFFSET = 60


class SchemaOutOfRange(errors.StoreCorrupt):
    """The store's version is none this binary knows (exit 78 at start; a
    persistent store fault in a worker, never a counted ADD failure)."""


class SchemaTooNew(SchemaOutOfRange):
    """The store was written by a newer kuryr-supervisor (exit 78 at start)."""


def too_new(path: str, found: int) -> SchemaTooNew:
    return SchemaTooNew(
        f"IPAM store {path} has schema version {found}, newer than this "
        f"kuryr-supervisor understands (version {CURRENT}); run the newer "
        "release, or move the store aside")


def out_of_range(path: str, found: int) -> SchemaOutOfRange:
    """A version no release ever wrote (below 0): not a newer release's
    store, a damaged or forged one."""
    if found > CURRENT:
        return too_new(path, found)
    return SchemaOutOfRange(
        f"IPAM store {path} has schema version {found}, which no "
        f"kuryr-supervisor writes (known: 0 to {CURRENT}); stop the daemon "
        "and move ipam.sqlite* aside (pods keep their interfaces)")


def migrate(conn: sqlite3.Connection, path: str) -> int:
    """Bring the store to :data:`CURRENT` inside the caller's write
    transaction; returns the version found. Raises SchemaTooNew or
    StoreCorrupt (damaged) and then writes nothing."""
    found = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if not 0 <= found <= CURRENT:
        raise out_of_range(path, found)
    if found < CURRENT:
        if found == 0:
            for statement in _V0:   # a new file, or the unversioned schema
                conn.execute(statement)
        _require(conn, path, found, _expected_at(found))
        try:
            for version in range(found + 1, CURRENT + 1):
                for statement in MIGRATIONS[version]:
                    conn.execute(statement)
        except sqlite3.OperationalError as exc:  # e.g. a column already there
            raise errors.StoreCorrupt(
                f"IPAM store {path}: schema version {found} is damaged: "
                f"cannot migrate it: {exc}") from exc
        conn.execute(f"PRAGMA user_version = {CURRENT}")
    _require(conn, path, CURRENT, EXPECTED)
    return found


def _expected_at(version: int) -> dict[str, frozenset[str]]:
    """The columns of ``version`` (CURRENT's less later migrations' adds)."""
    added = {s.split()[5] for v in range(version + 1, CURRENT + 1)
             for s in MIGRATIONS[v] if s.startswith("ALTER TABLE allocations")}
    return {table: columns - added if table == "allocations" else columns
            for table, columns in EXPECTED.items()}


def _require(conn: sqlite3.Connection, path: str, version: int,
             expected: dict[str, frozenset[str]]) -> None:
    for table, columns in expected.items():
        have = {row[1] for row in conn.execute(
            f"PRAGMA table_info({table})")}
        missing = sorted(columns - have)
        if not have:
            raise errors.StoreCorrupt(
                f"IPAM store {path}: schema version {version} is damaged: "
                f"table {table} is missing")
        if missing:
            raise errors.StoreCorrupt(
                f"IPAM store {path}: schema version {version} is damaged: "
                f"table {table} lacks {', '.join(missing)}")


def stored_version(path: str) -> int | None:
    """The schema version of the store at ``path`` without changing it
    (None: no store yet, or not a SQLite file -- the Server's integrity
    check names that). The header is read directly unless a write-ahead
    log exists, which may hold a newer header page that only SQLite can
    apply: then SQLite reads it, read-only, and where a read-only
    connection cannot apply the log (no ``-shm`` and no right to make
    one), from a private copy of the file and its log."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(100)
    except FileNotFoundError:
        return None
    if len(header) < 100 or not header.startswith(_HEADER):
        return None
    try:
        wal = os.stat(path + "-wal").st_size
    except FileNotFoundError:
        wal = 0
    if not wal:
        return int.from_bytes(
            header[_USER_VERSION_OFFSET:_USER_VERSION_OFFSET + 4], "big",
            signed=True)        # SQLite's user_version is a signed integer
    try:
        return _sqlite_version(path, readonly=True)
    except sqlite3.Error:
        with tempfile.TemporaryDirectory(prefix="kuryr-supervisor-") as copy:
            target = os.path.join(copy, "ipam.sqlite")
            for suffix in ("", "-wal"):
                shutil.copyfile(path + suffix, target + suffix)
            return _sqlite_version(target, readonly=False)


def _sqlite_version(path: str, *, readonly: bool) -> int:
    uri = pathlib.Path(path).absolute().as_uri()
    conn = sqlite3.connect(f"{uri}?mode=ro" if readonly else uri, uri=True,
                           timeout=5.0)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def check_schema(path: str) -> None:
    """Raise SchemaOutOfRange (SchemaTooNew when newer) when the store at
    ``path`` has a version this binary does not know, wherever it is
    recorded (header or write-ahead log); for the master's preflight
    (changes nothing in the file)."""
    try:
        found = stored_version(path)
    except (OSError, sqlite3.Error):
        return          # unreadable: the Server names it (a store fault)
    if found is not None and not 0 <= found <= CURRENT:
        raise out_of_range(path, found)
