"""The OVSDB adapter against a stand-in ``ovs-vsctl`` (a real subprocess:
a script that answers, fails or hangs), its errors as CNI errors, and the
readiness check ``ovsdb`` over it. The real ovsdb-server is exercised by
``tests/functional/test_ovs_binding*.py``."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from oslo_config import cfg

from kuryr_supervisor import errors
from kuryr_supervisor.cni import ovsdb
from kuryr_supervisor.cni.binding.ovsports import is_ours_by_name, ovsdb_error
from kuryr_supervisor.conf import binding as binding_conf
from kuryr_supervisor.health.checks.base import Kind, Sort
from kuryr_supervisor.health.checks.ovsdb import OvsdbCheck

FIND = {"headings": ["name", "external_ids", "mtu_request"],
        "data": [["ksv0123456789ab",
                  ["map", [["iface-id", "p-1"], ["kuryr-supervisor", "cni"]]],
                  ["set", []]]]}


def vsctl(tmp_path: Path, body: str) -> str:
    """A stand-in ovs-vsctl: records its arguments, then runs ``body``."""
    script = tmp_path / "ovs-vsctl"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/args\n{body}\n')
    script.chmod(0o755)
    return str(script)


def args(tmp_path: Path) -> list[str]:
    return (tmp_path / "args").read_text().splitlines()


def test_every_call_names_the_database_a_timeout_and_no_wait(tmp_path: Path) -> None:
    out = tmp_path / "find.json"
    out.write_text(json.dumps(FIND))
    db = ovsdb.Ovsdb("unix:/x/db.sock", 3.0, vsctl=vsctl(tmp_path, f"cat {out}"))
    iface = db.interface("ksv0123456789ab")
    assert iface == {"name": "ksv0123456789ab", "mtu_request": [],
                     "external_ids": {"iface-id": "p-1", "kuryr-supervisor": "cni"}}
    assert args(tmp_path)[:3] == ["--db=unix:/x/db.sock", "--timeout=3", "--no-wait"]
    assert args(tmp_path)[-3:] == ["find", "Interface", "name=ksv0123456789ab"]


def test_add_port_is_one_transaction_with_quoted_values(tmp_path: Path) -> None:
    db = ovsdb.Ovsdb("unix:/x/db.sock", 1.0, vsctl=vsctl(tmp_path, "true"))
    db.add_port("br-int", "ksv0123456789ab", {"iface-id": 'a"b=c', "x": "y"}, 1442)
    assert args(tmp_path)[3:] == [
        "--may-exist", "add-port", "br-int", "ksv0123456789ab", "--", "set",
        "Interface", "ksv0123456789ab", 'external_ids:iface-id="a\\"b=c"',
        'external_ids:x="y"', "mtu_request=1442"]


def test_a_hung_database_is_bounded(tmp_path: Path) -> None:
    db = ovsdb.Ovsdb("unix:/x/db.sock", 1.0, vsctl=vsctl(tmp_path, "exec sleep 30"))
    started = time.monotonic()
    with pytest.raises(ovsdb.OvsdbUnavailable, match="did not answer within 1 s"):
        db.ports("br-int")
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("stderr,kind,code,counted", [
    ("ovs-vsctl: unix:/x: database connection failed (No such file or directory)",
     errors.OvsdbUnavailable, 11, False),
    ("2026-01-01T00:00:00Z|00001|fatal_signal|WARN|terminating with signal 14 "
     "(Alarm clock)", errors.OvsdbUnavailable, 11, False),
    ("ovs-vsctl: no bridge named br-int", errors.OvsdbUnavailable, 11, False),
    ("ovs-vsctl: constraint violation: something", errors.PlumbingError, 100, True),
])
def test_failures_become_cni_errors(tmp_path: Path, stderr: str, kind: type,
                                    code: int, counted: bool) -> None:
    db = ovsdb.Ovsdb("unix:/x", 1.0, vsctl=vsctl(tmp_path, f"echo '{stderr}' >&2; exit 1"))
    with pytest.raises(ovsdb.OvsdbError) as info:
        db.del_port("br-int", "ksv0123456789ab")
    err = ovsdb_error("DEL", info.value, "br-int")
    assert type(err) is kind and err.wire.code == code
    assert err.wire.counts_as_failure is counted


def test_only_our_names_are_ours() -> None:
    assert is_ours_by_name("ksv0123456789ab")
    for name in ("ksv0123456789a", "ksv0123456789aB", "tap0123456789ab",
                 "ksv0123456789abc"):
        assert not is_ours_by_name(name)


def conf(connection: str = "unix:/x/db.sock") -> cfg.ConfigOpts:
    c = cfg.ConfigOpts()
    binding_conf.register_opts(c)
    c([], default_config_files=[])
    c.set_override("ovsdb_connection", connection, "binding")
    return c


def test_readiness_ovsdb(tmp_path: Path) -> None:
    rows = tmp_path / "rows.json"
    script = vsctl(tmp_path, f"cat {rows}")
    check = OvsdbCheck(conf(), connect=lambda c: ovsdb.Ovsdb(
        c.binding.ovsdb_connection, 1.0, vsctl=script))
    assert (check.kind, check.sort, check.name) == (Kind.READINESS, Sort.IO, "ovsdb")
    rows.write_text(json.dumps({"headings": ["name", "datapath_type"],
                                "data": [["br-int", "netdev"]]}))
    result = check.run(0.0)
    assert result.ok and "br-int present (datapath netdev" in result.message
    rows.write_text(json.dumps({"headings": ["name", "datapath_type"], "data": []}))
    result = check.run(0.0)
    assert not result.ok and "integration bridge br-int is not in OVSDB" in result.message
    hung = vsctl(tmp_path, "exec sleep 30")
    check = OvsdbCheck(conf(), connect=lambda c: ovsdb.Ovsdb(
        c.binding.ovsdb_connection, 1.0, vsctl=hung))
    result = check.run(0.0)
    assert not result.ok and result.message.startswith("OVSDB unix:/x/db.sock unusable")
