"""The data-plane readiness checks beside ``ovsdb`` (``ovn-controller``,
``flows``, ``datapath``) against stand-ins of the daemons' control sockets
(real Unix sockets speaking ``ovs-appctl``'s JSON-RPC) and of the held
OVSDB connection; ``flows`` also with the switch's flow counts injected,
as pods come and go between its reads; and ``bridge`` against injected
links. The real switch and its flows:
``tests/functional/test_dataplane_checks.py``; the real OVN:
``tests/functional/test_ovn_health.py`` and, pods coming and going,
``tests/functional/test_ovn_churn.py``."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg

from kuryr_supervisor.cni import netlink, ovsdb
from kuryr_supervisor.cni.ovsdb import daemons
from kuryr_supervisor.conf import binding as binding_conf
from kuryr_supervisor.health.checks.base import Kind, Sort
from kuryr_supervisor.health.checks.bridge import BridgeCheck
from kuryr_supervisor.health.checks.ovn import (
    SETTLE,
    DatapathCheck,
    FlowsCheck,
    OvnControllerCheck,
    ovs_checks,
)
from kuryr_supervisor.netcheck.node.dataplane import STATUS_CHECKS
from tests.fixtures.unixctl import Unixctl

DPIF = """netdev@ovs-netdev: hit:15 missed:21
  br-int:
    br-int 65534/3: (tap)
    ksv0123456789ab 2/5: (system)
  br-phy:
    br-phy 65534/1: (tap)
"""


class Db:
    """What the checks ask of the held connection: ``rows`` as its
    monitor has them, ``now`` as the database has them when asked (None:
    the same)."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {"ovn-remote": "unix:/sb.sock",
                                    "system-id": "node-a"}
        self.rows: list[dict[str, Any]] = []
        self.now: list[dict[str, Any]] | None = None
        self.error: Exception | None = None
        self.now_error: Exception | None = None
        self.asked = 0

    def node(self) -> dict[str, str]:
        if self.error is not None:
            raise self.error
        return dict(self.ids)

    def our_interfaces(self) -> list[dict[str, Any]]:
        if self.error is not None:
            raise self.error
        return [dict(r) for r in self.rows]

    def our_interfaces_now(self) -> list[dict[str, Any]]:
        self.asked += 1
        if self.error or self.now_error:
            raise self.error or self.now_error    # type: ignore[misc]
        return [dict(r) for r in (self.rows if self.now is None
                                  else self.now)]


@pytest.fixture
def rundir(tmp_path: Path) -> Path:
    path = tmp_path / "run"
    path.mkdir()
    return path


def make(rundir: Path) -> tuple[cfg.ConfigOpts, Any]:
    conf = cfg.ConfigOpts()
    binding_conf.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override("ovsdb_connection", f"unix:{rundir}/db.sock", "binding")
    conf.set_override("ovn_rundir", str(rundir), "binding")
    conf.set_override("ovsdb_timeout", 3.0, "binding")
    db = Db()
    return conf, db


def test_names_kinds_and_bounds(rundir: Path) -> None:
    conf, db = make(rundir)
    checks = ovs_checks(conf, db)
    assert [c.name for c in checks] == ["ovsdb", "ovn-controller", "flows",
                                        "datapath"]
    for check in checks:
        assert (check.kind, check.sort) == (Kind.READINESS, Sort.IO)
        assert check.timeout() == 3.0
        assert check.name in STATUS_CHECKS     # they reach STATUS
    # The four hold the one connection they are given.
    assert checks[0].db is db  # type: ignore[attr-defined]
    assert {id(c._db) for c in checks[1:]} == {id(db)}  # type: ignore[attr-defined]


def test_ovn_controller(rundir: Path) -> None:
    conf, db = make(rundir)
    check = OvnControllerCheck(conf, db)
    result = check.run(0)
    assert not result.ok and not result.shared      # this node's own
    assert result.message == (f"ovn-controller is not running (no pidfile "
                              f"and control socket under {rundir})")
    ctl = Unixctl(rundir, "ovn-controller",
                  {"connection-status": "connected"}).start()
    try:
        result = check.run(0)
        assert result.ok, result.message
        assert "connected to the Southbound database (unix:/sb.sock)" in \
            result.message
        ctl.replies["connection-status"] = "not connected"
        result = check.run(0)
        assert not result.ok
        assert result.message == ("ovn-controller is not connected to the "
                                  "Southbound database (unix:/sb.sock): "
                                  "not connected")
        # What every node meets at once when the database fails.
        assert result.shared
        # Hung (its socket still accepts): failed within the question's
        # second, never held.
        ctl.hang = True
        started = time.monotonic()
        result = check.run(0)
        assert time.monotonic() - started < daemons.CTL_TIMEOUT + 0.5
        assert not result.ok
        assert result.message.startswith("ovn-controller does not answer "
                                         "on its control socket")
        assert not result.shared
    finally:
        ctl.close()
    # Not an OVN chassis: nothing to check.
    db.ids = {}
    assert check.run(0).ok and "not an OVN chassis" in check.run(0).message
    db.error = ovsdb.OvsdbUnavailable("OVSDB unix:x: no answer within 3 s")
    result = check.run(0)
    assert not result.ok and "no answer within 3 s" in result.message


def test_flows_processed_and_installed_ports(rundir: Path) -> None:
    conf, db = make(rundir)
    check = FlowsCheck(conf, db)
    ctl = Unixctl(rundir, "ovn-controller",
                  {"coverage/read-counter lflow_run": "0"}).start()
    try:
        result = check.run(0)
        assert not result.ok
        assert result.message == ("ovn-controller has not processed the "
                                  "logical flows yet")
        ctl.replies["coverage/read-counter lflow_run"] = "12"
        assert check.run(0).message == "no port of ours installed by OVN yet"
        # A port installed, but the switch cannot be asked for its flows
        # (no management socket here): failed, named.
        db.rows = [{"name": "ksv0123456789ab", "ofport": 5,
                    "external_ids": {"ovn-installed": "true"}},
                   {"name": "ksvffffffffffff", "ofport": 6,
                    "external_ids": {}}]
        result = check.run(0)
        assert not result.ok
        assert result.message.startswith(f"cannot read br-int's flows: "
                                         f"{rundir}/br-int.mgmt")
    finally:
        ctl.close()


def iface(name: str, row: str, ofport: int, *,
          installed: bool = True) -> dict[str, Any]:
    """One of our Interfaces as the database has it."""
    ids = {"kuryr-supervisor": "cni", "iface-id": f"port-{name}"}
    if installed:
        ids["ovn-installed"] = "true"
    return {"_uuid": row, "name": name, "ofport": ofport,
            "external_ids": ids}


STAY, GOING = "ksv00000000aaaa", "ksv00000000bbbb"


class Switch:
    """The switch's flow counts (ofport -> flows), each read recorded;
    ``on_read`` runs before a read answers (what happens meanwhile)."""

    def __init__(self, flows: dict[int, int]) -> None:
        self.flows = flows
        self.reads: list[list[int]] = []
        self.on_read: list[Any] = []

    def __call__(self, ofports: Any) -> dict[int, int]:
        self.reads.append(list(ofports))
        if self.on_read:
            self.on_read.pop(0)()
        return {p: self.flows.get(p, 0) for p in ofports}


def churned(rundir: Path, meanwhile: Any = None
            ) -> tuple[Db, Switch, list[float], FlowsCheck]:
    """Two installed ports with their flows (STAY on ofport 5, GOING on 6),
    as the monitor and the database have them; ``meanwhile(db)`` runs
    during the check's pause."""
    conf, db = make(rundir)
    db.rows = [iface(STAY, "row-a", 5), iface(GOING, "row-b", 6)]
    switch = Switch({5: 3, 6: 2})
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if meanwhile is not None:
            meanwhile(db)
    return db, switch, slept, FlowsCheck(conf, db, counts=switch,
                                         sleep=sleep)


def test_flows_a_pod_deleted_between_the_reads_is_not_counted(
        rundir: Path) -> None:
    """The race a pod's DEL made: the monitor still has its port
    installed when the flows are read, but the DEL committed meanwhile
    and ovn-controller took the flows away; the database, asked after,
    has the row gone: not counted, no pause, nothing failed."""
    db, switch, slept, check = churned(rundir)
    assert check.run(0).message == "br-int holds the flows of all 2 ports " \
                                   "OVN installed"
    assert db.asked == 0            # every port had its flows: no look

    def deleted() -> None:
        db.now = [r for r in db.rows if r["name"] != GOING]
        switch.flows.pop(6, None)
    switch.on_read.append(deleted)
    result = check.run(0)
    assert result.ok, result.message
    assert result.message == "br-int holds the flows of all 1 ports OVN " \
                             "installed"
    assert switch.reads == [[5, 6], [5, 6]] and db.asked == 1
    assert slept == []

    # Only the pod going was installed: nothing of ours left to count.
    db.rows, db.now = [iface(GOING, "row-b", 6)], None
    switch.on_read.append(deleted)
    assert check.run(0).message == "no port of ours installed by OVN yet"


def test_flows_a_port_made_again_or_reused_is_not_counted(
        rundir: Path) -> None:
    """The port read is gone and another row has its name (an ADD again,
    not installed yet) or its ofport (another port's ADD): neither is the
    port read, which had its flows until it went."""
    db, switch, slept, check = churned(rundir)
    switch.flows.pop(6)
    db.now = [iface(STAY, "row-a", 5), iface(GOING, "row-c", 6,
                                              installed=False)]
    assert check.run(0).ok
    db.now = [iface(STAY, "row-a", 5), iface("ksv00000000cccc", "row-c", 6)]
    assert check.run(0).ok
    # The same row under another ofport (ovs-vswitchd numbered it again):
    # the flows asked for were another port's.
    db.now = [iface(STAY, "row-a", 5), iface(GOING, "row-b", 7)]
    assert check.run(0).ok
    assert slept == []


def test_flows_a_released_port_marked_a_moment_later_is_not_counted(
        rundir: Path) -> None:
    """ovn-controller took a released port's flows away (its Neutron port
    deleted, its iface-id repointed) and takes its ovn-installed mark away
    in a later write: still marked at the first look, not at the second,
    SETTLE s later."""
    released = [iface(STAY, "row-a", 5), iface(GOING, "row-b", 6,
                                                installed=False)]
    db, switch, slept, check = churned(
        rundir, lambda db: setattr(db, "now", released))
    switch.flows.pop(6)
    result = check.run(0)
    assert result.ok, result.message
    assert slept == [SETTLE]
    assert switch.reads == [[5, 6], [6]] and db.asked == 2


def test_flows_a_port_that_lost_its_flows_fails_within_the_run(
        rundir: Path) -> None:
    """The port is still there, installed, the same row, at both looks,
    and has no flows at either: failed, named, in this run."""
    db, switch, slept, check = churned(rundir)
    switch.flows.pop(6)
    result = check.run(0)
    assert not result.ok
    assert result.message == (f"br-int has no flows for 1 of 2 ports OVN "
                              f"installed ({GOING}): their pods have no "
                              "network")
    assert result.value == 1.0
    assert slept == [SETTLE] and switch.reads == [[5, 6], [6]]
    # Its flows back by the second look (ovn-controller reinstalled them):
    # fine.
    switch.on_read = [lambda: None, lambda: switch.flows.update({6: 2})]
    assert check.run(0).ok
    # The database cannot be asked after the flow read: cannot tell.
    switch.flows.pop(6)
    db.now_error = ovsdb.OvsdbUnavailable("OVSDB unix:x: no answer within "
                                          "3 s")
    result = check.run(0)
    assert not result.ok and result.message == (
        "cannot tell: OVSDB unix:x: no answer within 3 s")


def test_datapath(rundir: Path) -> None:
    conf, db = make(rundir)
    check = DatapathCheck(conf, db)
    assert check.run(0).message.startswith("ovs-vswitchd is not running")
    ctl = Unixctl(rundir, "ovs-vswitchd", {"dpif/show": DPIF}).start()
    try:
        result = check.run(0)
        assert result.ok and result.message == \
            "br-int on datapath netdev@ovs-netdev"
        ctl.replies["dpif/show"] = DPIF.replace("  br-int:", "  br-x:")
        result = check.run(0)
        assert not result.ok
        assert "ovs-vswitchd has no datapath for br-int" in result.message
    finally:
        ctl.close()


def test_datapath_of() -> None:
    assert daemons.datapath_of(DPIF, "br-phy") == "netdev@ovs-netdev"
    assert daemons.datapath_of(DPIF, "br-int") == "netdev@ovs-netdev"
    assert daemons.datapath_of(DPIF, "ksv0123456789ab") is None
    two = "system@ovs-system: hit:1\n  br-ex:\nnetdev@ovs-netdev: hit:2\n" \
          "  br-int:\n"
    assert daemons.datapath_of(two, "br-ex") == "system@ovs-system"
    assert daemons.datapath_of(two, "br-int") == "netdev@ovs-netdev"


def test_rundir_of() -> None:
    assert daemons.rundir_of("unix:/run/openvswitch/db.sock") == \
        "/run/openvswitch"
    assert daemons.rundir_of("tcp:127.0.0.1:6640") == "/run/openvswitch"


def link(kind: str = "bridge", up: bool = True) -> netlink.Link:
    return netlink.Link("kuryr0", 7, kind, "02:00:00:00:00:01", 1500, up,
                        None)


def test_bridge() -> None:
    found: list[netlink.Link | None | Exception] = [None]

    def read(name: str) -> netlink.Link | None:
        assert name == "kuryr0"
        value = found[0]
        if isinstance(value, Exception):
            raise value
        return value
    check = BridgeCheck("kuryr0", read=read)
    assert (check.kind, check.sort) == (Kind.READINESS, Sort.IO)
    assert check.run(0).ok          # never made yet: the first ADD makes it
    found[0] = link(kind="veth")    # the name taken by another kind of link
    assert not check.run(0).ok
    found[0] = None                 # it went: still a bridge never seen
    assert check.run(0).ok
    found[0] = link()
    assert check.run(0).message == "bridge kuryr0 up (no address)"
    found[0] = link(up=False)
    assert check.run(0).message == ("bridge kuryr0 is down: the pods on it "
                                    "have no network")
    found[0] = link(kind="dummy")
    assert not check.run(0).ok
    found[0] = None                 # seen, then gone
    result = check.run(0)
    assert not result.ok and "is gone" in result.message
    found[0] = netlink.NetlinkError("read kuryr0: Operation not permitted", 1)
    assert not check.run(0).ok
