"""The OVSDB adapter against a real ovsdb-server (a private one, no
ovs-vswitchd): one transaction per port, updated in place, the monitor of
our own Interfaces only and a wait woken by its updates, our Interfaces
asked of the database itself, a hung server bounded, a restarted one
reconnected, and a forked child that never uses its parent's
connection."""
from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterator

import pytest

from kuryr_supervisor.cni.ovsdb import Ovsdb, OvsdbError, OvsdbUnavailable
from tests.fixtures.ovs import PrivateOVS

pytestmark = pytest.mark.privileged


@pytest.fixture
def ovs() -> Iterator[PrivateOVS]:
    switch = PrivateOVS().start(vswitchd=False)
    yield switch
    switch.close()


@pytest.fixture
def bridge(ovs: PrivateOVS) -> str:
    name = "ksvd" + secrets.token_hex(4)
    ovs.vsctl("--no-wait", "add-br", name, "--", "set", "Bridge", name,
              "datapath_type=netdev")
    return name


def ids(port: str) -> dict[str, str]:
    return {"iface-id": port, "attached-mac": "fa:16:3e:00:00:01",
            "kuryr-supervisor": "cni"}


def installed(row: dict[str, object]) -> bool:
    marks = row["external_ids"]
    assert isinstance(marks, dict)
    return marks.get("ovn-installed") == "true"


def test_ports_in_one_transaction_and_in_place(ovs: PrivateOVS,
                                               bridge: str) -> None:
    db = Ovsdb(ovs.connection, 2.0, bridge=bridge)
    try:
        db.add_port(bridge, "ksv000000000001", ids("p1"), 1400)
        assert ovs.vsctl("list-ports", bridge) == "ksv000000000001"
        # ovs-vsctl's view: the Interface's ids and MTU, the Port marked.
        found = json.loads(ovs.vsctl(
            "--format=json", "--columns=external_ids,mtu_request", "find",
            "Interface", "name=ksv000000000001"))["data"][0]
        assert dict(found[0][1]) == ids("p1") and found[1] == 1400
        assert "kuryr-supervisor=cni" in ovs.vsctl(
            "get", "Port", "ksv000000000001", "external_ids").replace('"', "")
        db.add_port(bridge, "ksv000000000001", ids("p2"), 1300)   # in place
        assert db.interface("ksv000000000001") == {
            "name": "ksv000000000001", "external_ids": ids("p2"),
            "mtu_request": 1300}
        assert db.ports(bridge) == ["ksv000000000001"]
        with pytest.raises(OvsdbError, match="no bridge named nobridge"):
            db.add_port("nobridge", "ksv000000000002", ids("p3"), 1400)
        with pytest.raises(OvsdbError, match="no bridge named nobridge"):
            db.ports("nobridge")
        db.del_port(bridge, "ksv000000000001")
        db.del_port(bridge, "ksv000000000001")              # gone: fine
        assert ovs.vsctl("list-ports", bridge) == ""
        # A port made by ovs-vsctl (no mark on its Port) is found too.
        ovs.vsctl("--no-wait", "add-port", bridge, "ksv000000000003")
        db.del_port(bridge, "ksv000000000003")
        assert ovs.vsctl("list-ports", bridge) == ""
        assert db.datapath_type() == "netdev"
    finally:
        db.close()


def test_the_monitor_holds_ours_only_and_wakes_a_wait(ovs: PrivateOVS,
                                                      bridge: str) -> None:
    db = Ovsdb(ovs.connection, 2.0, bridge=bridge)
    try:
        ovs.vsctl("--no-wait", "add-port", bridge, "foreign0", "--", "set",
                  "Interface", "foreign0", "external_ids:iface-id=x")
        db.add_port(bridge, "ksv000000000004", ids("p4"), 1400)
        assert db.our_interface("foreign0") is None
        assert db.our_interface("ksv000000000004") is not None
        assert db.wait_interface("ksv000000000004", installed, 0.2) is None
        ovs.vsctl("--no-wait", "set", "open_vswitch", ".",
                  "external_ids:ovn-remote=unix:/sb.sock")
        started = time.monotonic()
        ovs.vsctl("--no-wait", "set", "Interface", "ksv000000000004",
                  "external_ids:ovn-installed=true")
        row = db.wait_interface("ksv000000000004", installed, 5)
        assert row is not None and time.monotonic() - started < 2
        assert db.node()["ovn-remote"] == "unix:/sb.sock"
    finally:
        db.close()


def test_our_interfaces_asked_of_the_database(ovs: PrivateOVS,
                                             bridge: str) -> None:
    """Ours only, the rows the monitor has (same ``_uuid``), and a port
    deleted is gone from the answer at once."""
    db = Ovsdb(ovs.connection, 2.0, bridge=bridge)
    try:
        ovs.vsctl("--no-wait", "add-port", bridge, "foreign1", "--", "set",
                  "Interface", "foreign1", "external_ids:iface-id=x")
        db.add_port(bridge, "ksv000000000005", ids("p5"), 1400)
        [row] = db.our_interfaces_now()
        assert row["name"] == "ksv000000000005"
        assert row["external_ids"] == ids("p5")
        assert row["ofport"] is None            # no ovs-vswitchd here
        seen = db.wait_interface("ksv000000000005", lambda r: True, 2)
        assert seen is not None and seen["_uuid"] == row["_uuid"]
        ovs.vsctl("--no-wait", "del-port", bridge, "ksv000000000005")
        assert db.our_interfaces_now() == []
    finally:
        db.close()


def test_a_hung_server_is_bounded_and_a_restarted_one_reconnected(
        ovs: PrivateOVS, bridge: str) -> None:
    db = Ovsdb(ovs.connection, 1.0, bridge=bridge)
    try:
        assert db.bridge(bridge) is not None
        ovs.stop_db()
        started = time.monotonic()
        with pytest.raises(OvsdbUnavailable, match="no answer within 1 s"):
            db.add_port(bridge, "ksv000000000005", ids("p5"), 1400)
        assert time.monotonic() - started < 1.5
        ovs.continue_db()
        ovs.restart_db()
        deadline = time.monotonic() + 10
        while True:
            try:
                assert db.bridge(bridge) is not None
                break
            except OvsdbUnavailable:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert db.state() == (True, "")
    finally:
        db.close()


def test_a_forked_child_opens_its_own(ovs: PrivateOVS, bridge: str) -> None:
    db = Ovsdb(ovs.connection, 2.0, bridge=bridge)
    try:
        assert db.bridge(bridge) is not None          # the parent's, open
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:                                   # the child
            try:
                db.add_port(bridge, "ksv000000000006", ids("p6"), 1400)
                os.write(write, b"ok")
            finally:
                os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        assert os.read(read, 10) == b"ok"
        os.close(read)
        # The parent's connection still works and its monitor saw it.
        assert db.wait_interface("ksv000000000006", lambda r: True, 5)
        assert db.ports(bridge) == ["ksv000000000006"]
    finally:
        db.close()
