"""The store's schema version: migration from the unversioned schema, a
newer store refused unchanged, a damaged one named, no -wal left at close."""
from __future__ import annotations

import ipaddress
import multiprocessing
import os
import pathlib
import sqlite3
from typing import Any

import pytest

from kuryr_supervisor import errors
from kuryr_supervisor.cni import protocol
from kuryr_supervisor.cni.ipam import (
    PENDING,
    PLUMBED,
    IpamStore,
    Plumbing,
    PodRef,
    database,
    schema,
)
from kuryr_supervisor.cni.ipam import store as ipam_store
from kuryr_supervisor.cni.locks import ContainerLocks
from kuryr_supervisor.cni.service import CNIService
from kuryr_supervisor.state import Fault, SharedState

NET = ipaddress.IPv4Network("10.99.0.0/24")
V0_SQL = (pathlib.Path(__file__).parent.parent / "fixtures" / "ipam"
          / "schema_v0.sql").read_text()
FACTS = Plumbing("ksv000000000001", "02:00:00:00:00:01", "02:00:00:00:00:02",
                 1500)


@pytest.fixture
def db(tmp_path: pathlib.Path) -> str:
    (tmp_path / "state").mkdir(mode=0o700)
    return str(tmp_path / "state" / "ipam.sqlite")


def make_v0(path: str, rows: int = 2) -> None:
    """A store as the daemon before versioning left it: WAL mode, the old
    tables, rows written with the old columns, user_version never set."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(V0_SQL)
    for n in range(rows):
        conn.execute(
            "INSERT INTO allocations (container_id, ifname, address, "
            "prefixlen, gateway, netns, pod_namespace, pod_name, pod_uid, "
            "created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (f"old{n}", "eth0", int(NET[2 + n]), 24, str(NET[1]),
             f"/var/run/netns/old{n}", "ns", f"pod{n}", f"uid{n}", 100.0 + n))
    conn.execute("INSERT INTO cursors (range, last) VALUES (?, ?)",
                 (f"{NET[1]}-{NET[-2]}", int(NET[2 + rows - 1])))
    conn.close()


def version(path: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def columns(path: str, table: str = "allocations") -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()


def set_version(path: str, value: int) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA user_version = {value}")
    conn.close()


def test_new_store_is_created_at_the_current_version(db: str) -> None:
    IpamStore(db, NET).close()
    assert version(db) == schema.CURRENT == 1
    assert set(columns(db)) == schema.EXPECTED["allocations"]


def test_unversioned_store_is_migrated_and_adopted(db: str) -> None:
    make_v0(db)
    assert version(db) == 0
    store = IpamStore(db, NET)
    assert version(db) == schema.CURRENT
    old = store.list()
    assert [(a.container_id, str(a.address), a.state, a.netconf, a.plumbing)
            for a in old] == [("old0", "10.99.0.2/24", PLUMBED, None, None),
                              ("old1", "10.99.0.3/24", PLUMBED, None, None)]
    # the cursor is kept: the next address follows the old daemon's last
    fresh = store.allocate("new", "eth0", netns="/x", pod=PodRef("", "", ""))
    assert str(fresh.address) == "10.99.0.4/24" and fresh.state == PENDING
    # an older daemon's attachment is released by DEL as before
    assert store.release("old0", "eth0") == old[0]
    store.close(final=True)
    assert not os.path.exists(db + "-wal")


def test_migration_is_one_transaction(db: str) -> None:
    """A v0 store whose allocations already has one of the new columns
    cannot be migrated: it is named damaged and left exactly at version 0."""
    make_v0(db)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("ALTER TABLE allocations ADD COLUMN mtu INTEGER")
    conn.close()
    before = columns(db)
    with pytest.raises(errors.StoreCorrupt, match="damaged"):
        IpamStore(db, NET)
    assert version(db) == 0 and columns(db) == before


@pytest.mark.parametrize("wal", [False, True])
def test_newer_store_is_refused_and_unchanged(db: str, wal: bool) -> None:
    store = IpamStore(db, NET)
    store.allocate("c1", "eth0", netns="/x", pod=PodRef("", "", ""))
    store.close(final=True)
    set_version(db, schema.CURRENT + 1)
    if wal:     # the version only in the write-ahead log, not the header
        keeper = sqlite3.connect(db, isolation_level=None)
        keeper.execute("PRAGMA wal_autocheckpoint = 0")
        keeper.execute(f"PRAGMA user_version = {schema.CURRENT + 2}")
        expected = schema.CURRENT + 2
    else:
        expected = schema.CURRENT + 1
    before = pathlib.Path(db).read_bytes()
    with pytest.raises(schema.SchemaTooNew) as info:
        schema.check_schema(db)
    assert (f"schema version {expected}" in info.value.msg
            and f"(version {schema.CURRENT})" in info.value.msg)
    assert "\n" not in info.value.msg
    if not wal:
        assert not os.path.exists(db + "-wal")     # nothing was opened
        with pytest.raises(schema.SchemaTooNew):
            IpamStore(db, NET)              # the workers refuse it too
        assert isinstance(info.value, errors.StoreCorrupt)
    assert pathlib.Path(db).read_bytes() == before
    if wal:
        keeper.close()


def test_check_schema_accepts_missing_current_and_older(db: str) -> None:
    schema.check_schema(db)                  # no store yet
    assert not os.path.exists(db)
    make_v0(db)
    schema.check_schema(db)
    IpamStore(db, NET).close()
    schema.check_schema(db)
    pathlib.Path(db).write_bytes(b"not a database at all" * 10)
    schema.check_schema(db)                  # the Server names corruption


@pytest.mark.parametrize("damage", [
    "ALTER TABLE allocations DROP COLUMN mtu",
    "DROP TABLE cursors",
    "DROP TABLE allocations",
])
def test_damaged_schema_is_a_persistent_fault(db: str, tmp_path: Any,
                                              damage: str) -> None:
    IpamStore(db, NET).close()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(damage)
    conn.close()
    with pytest.raises(errors.StoreCorrupt, match="damaged"):
        IpamStore(db, NET)
    # through the service: readiness names it, the budget does not count it
    state = SharedState.create(multiprocessing.get_context("fork"))
    service = CNIService(lambda: IpamStore(db, NET), _NoBinding(),
                         ContainerLocks(str(tmp_path / "locks")), state)
    assert service.verify_environment(str(tmp_path)) & Fault.IPAM_STORE
    request = protocol.parse({"env": {
        "CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0",
        "CNI_NETNS": "/proc/self/ns/net"}, "config": {
            "cniVersion": "1.0.0", "name": "n", "type": "kuryr-cni"}})
    with pytest.raises(errors.StoreCorrupt) as info:
        service.handle(request)
    assert not info.value.wire.counts_as_failure
    assert state.cni_failures() == 0
    assert state.faults() & Fault.IPAM_STORE


class _NoBinding:
    def verify(self) -> None:
        pass


def test_plumbed_records_the_facts_for_replay(db: str) -> None:
    store = IpamStore(db, NET)
    alloc = store.allocate("c1", "eth0", netns="/x", pod=PodRef("", "", ""))
    assert store.get("c1", "eth0") == alloc and alloc.state == PENDING
    store.plumbed("c1", "eth0", netconf="d" * 64, plumbing=FACTS)
    again = IpamStore(db, NET).get("c1", "eth0")    # another connection
    assert again is not None
    assert (again.state, again.netconf, again.plumbing) == (PLUMBED, "d" * 64,
                                                            FACTS)
    assert again.address == alloc.address and again.created == alloc.created
    with pytest.raises(errors.IpamStoreError):
        store.plumbed("gone", "eth0", netconf="x", plumbing=FACTS)


def test_final_close_leaves_no_wal_and_refuses_later_use(db: str) -> None:
    store = IpamStore(db, NET)
    store.allocate("c1", "eth0", netns="/x", pod=PodRef("", "", ""))
    reader = IpamStore(db, NET)
    assert len(reader.list()) == 1          # a second connection is open
    assert os.path.exists(db + "-wal")
    store.close(final=True)
    assert os.path.getsize(db + "-wal") == 0   # checkpointed and truncated
    reader.close()                          # the last one deletes it
    assert not os.path.exists(db + "-wal")
    assert not os.path.exists(db + "-shm")
    with pytest.raises(errors.IpamStoreError, match="closed"):
        store.list()
    assert len(reader.list()) == 1          # a plain close reopens on use
    reader.close()


def test_metrics_reader_leaves_no_wal(db: str) -> None:
    """The HealthManager counts allocations on a timer; as the last
    connection to close it must not leave -wal and -shm behind, which a
    read-only (mode=ro) connection does."""
    store = IpamStore(db, NET)
    store.allocate("c1", "eth0", netns="/x", pod=PodRef("", "", ""))
    store.close(final=True)
    assert ipam_store.allocated_count(db) == 1
    assert sorted(os.listdir(os.path.dirname(db))) == ["ipam.sqlite"]
    assert ipam_store.allocated_count(db + ".missing") == 0
    assert not os.path.exists(db + ".missing")


def _allocate_and_vanish(path: str) -> None:
    """A process that used the store and ended without closing it, as a
    worker ended mid-use does (cotyledon ends a worker with ``os._exit``)."""
    store = IpamStore(path, NET)
    store.allocate("c1", "eth0", netns="/x", pod=PodRef("", "", ""))
    assert store.list()
    os._exit(0)


def test_settle_after_a_user_vanished_leaves_the_file_alone(db: str) -> None:
    """The master's last step: whatever a worker left open, one connection
    opened alone checkpoints the log into the file and deletes -wal and
    -shm; nothing committed is lost, and a missing file is not created."""
    child = multiprocessing.get_context("fork").Process(
        target=_allocate_and_vanish, args=(db,))
    child.start()
    child.join()
    assert child.exitcode == 0
    names = sorted(os.listdir(os.path.dirname(db)))
    assert names == ["ipam.sqlite", "ipam.sqlite-shm", "ipam.sqlite-wal"]
    database.settle(db)
    assert sorted(os.listdir(os.path.dirname(db))) == ["ipam.sqlite"]
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)   # the file alone
    try:
        assert conn.execute("SELECT container_id FROM allocations"
                            ).fetchall() == [("c1",)]
    finally:
        conn.close()
    database.settle(db + ".missing")
    assert not os.path.exists(db + ".missing")


def test_the_plumbing_mark_is_not_fsynced_and_the_rest_still_is(
        db: str) -> None:
    """The ADD's one extra write skips the disk flush (synchronous=NORMAL
    for that commit alone); every other commit stays FULL."""
    store = IpamStore(db, NET)
    store.allocate("c1", "eth0", netns="/x", pod=PodRef("", "", ""))
    seen: list[str] = []
    conn = store._db._conn
    assert conn is not None
    conn.set_trace_callback(seen.append)
    store.plumbed("c1", "eth0", netconf="d", plumbing=FACTS)
    with pytest.raises(errors.IpamStoreError):
        store.plumbed("c2", "eth0", netconf="d", plumbing=FACTS)
    conn.set_trace_callback(None)
    assert seen.count("PRAGMA synchronous=NORMAL") == 2
    assert seen.count("PRAGMA synchronous=FULL") == 2
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2   # FULL


def add_request() -> protocol.Request:
    return protocol.parse({"env": {
        "CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0",
        "CNI_NETNS": "/proc/self/ns/net"}, "config": {
            "cniVersion": "1.0.0", "name": "n", "type": "kuryr-cni"}})


@pytest.mark.parametrize("value", [-1, -(2**31)])
def test_a_negative_version_is_refused_wherever_recorded(
        db: str, tmp_path: Any, value: int) -> None:
    """Below 0, in the header or only in the write-ahead log: refused by
    the preflight and by the store; through the service a store fault
    (readiness), never counted, with a message that says something."""
    IpamStore(db, NET).close(final=True)
    set_version(db, value)
    with pytest.raises(schema.SchemaOutOfRange, match=f"version {value},"):
        schema.check_schema(db)                 # the header, read directly
    set_version(db, schema.CURRENT)
    keeper = sqlite3.connect(db, isolation_level=None)
    try:
        keeper.execute("PRAGMA wal_autocheckpoint = 0")
        keeper.execute(f"PRAGMA user_version = {value}")    # the WAL only
        with pytest.raises(schema.SchemaOutOfRange) as info:
            schema.check_schema(db)
        assert not isinstance(info.value, schema.SchemaTooNew)
        assert "\n" not in info.value.msg and db in info.value.msg
        state = SharedState.create(multiprocessing.get_context("fork"))
        service = CNIService(lambda: IpamStore(db, NET), _NoBinding(),
                             ContainerLocks(str(tmp_path / "locks")), state)
        for _ in range(5):
            with pytest.raises(errors.StoreCorrupt) as err:
                service.handle(add_request())
            assert f"schema version {value}" in err.value.msg
        assert state.cni_failures() == 0
        assert state.faults() & Fault.IPAM_STORE
    finally:
        keeper.close()


def test_a_store_the_schema_code_cannot_read_is_a_store_fault(
        db: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever escapes the schema code (here a KeyError as a negative
    version once raised) is a fault of the store, not a counted ADD
    failure answered "ADD failed: 0"."""
    def broken(conn: sqlite3.Connection, path: str) -> None:
        raise KeyError(0)
    monkeypatch.setattr(ipam_store.schema, "migrate", broken)
    state = SharedState.create(multiprocessing.get_context("fork"))
    service = CNIService(lambda: IpamStore(db, NET), _NoBinding(),
                         ContainerLocks(str(tmp_path / "locks")), state)
    with pytest.raises(errors.StoreCorrupt) as err:
        service.handle(add_request())
    assert "KeyError: 0" in err.value.msg and state.cni_failures() == 0


@pytest.mark.parametrize("exc, text", [
    (KeyError(0), "KeyError: 0"), (ValueError(""), "ValueError: no detail"),
    (OSError("disk gone"), "disk gone")])
def test_no_error_says_only_a_number(exc: BaseException, text: str) -> None:
    assert errors.describe(exc) == text
    assert errors.InternalError("0").msg == "InternalError: 0"
    assert errors.InternalError("").msg == "InternalError: no detail"
