"""Classification of environment faults: which failures the budget counts.

Inputs are real: SQLite errors raised by the sqlite3 module on real files,
/proc status files written as fixtures, netlink errors with their errno.
"""
from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import pytest

from kuryr_supervisor import errors
from kuryr_supervisor.cni import environment, netlink
from kuryr_supervisor.cni.binding.base import plumbing_error
from kuryr_supervisor.cni.ipam.database import classify


def sqlite_error(tmp_path: Path, content: bytes | None, sql: str) -> sqlite3.Error:
    path = tmp_path / "db.sqlite"
    if content is not None:
        path.write_bytes(content)
    conn = sqlite3.connect(path)
    try:
        conn.execute(sql)
    except sqlite3.Error as exc:
        return exc
    finally:
        conn.close()
    raise AssertionError("no error")


def test_sqlite_failures_by_cause(tmp_path: Path) -> None:
    corrupt = sqlite_error(tmp_path, b"not a database" * 100,
                           "SELECT * FROM sqlite_master")
    assert isinstance(classify(corrupt, "x"), errors.StoreCorrupt)
    busy = sqlite3.OperationalError("database is locked")
    busy.sqlite_errorcode = 5          # type: ignore[attr-defined]
    transient = classify(busy, "x")
    assert type(transient) is errors.IpamStoreError
    assert transient.wire.counts_as_failure
    full = OSError(errno.ENOSPC, "No space left on device")
    unwritable = classify(full, "x")
    assert isinstance(unwritable, errors.StoreUnwritable)
    assert not unwritable.wire.counts_as_failure
    assert unwritable.wire.code == 105


def test_net_admin_from_the_capability_set(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tx\nCapEff:\t000001ffffffffff\n")
    environment.require_net_admin(str(status))
    status.write_text("Name:\tx\nCapEff:\t0000000000000000\n")
    with pytest.raises(errors.NoNetAdmin):
        environment.require_net_admin(str(status))


def test_netlink_errors_by_cause() -> None:
    assert isinstance(plumbing_error("x", netlink.NetlinkError("no", errno.EPERM)),
                      errors.NoNetAdmin)
    assert isinstance(plumbing_error("x", netlink.WrongLinkKind("veth", errno.EEXIST)),
                      errors.BridgeConflict)
    transient = plumbing_error("x", netlink.NetlinkError("busy", errno.EBUSY))
    assert isinstance(transient, errors.PlumbingError)
    assert transient.wire.counts_as_failure


def test_disk_probe_on_a_writable_directory(tmp_path: Path) -> None:
    environment.disk_probe(str(tmp_path), write=True)
    assert os.listdir(tmp_path) == []          # the probe file is removed
