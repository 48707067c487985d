"""The ``flows`` and ``datapath`` readiness checks against a real switch (a
private Open vSwitch, userspace datapath) over the daemon's own held OVSDB
connection: the flows of a port OVN marked installed are counted over
OpenFlow; deleting them (``ovs-ofctl del-flows``, which leaves
``ovn-installed`` in place) fails ``flows`` naming the port; an
ovs-vswitchd that stops answering fails ``datapath`` within its bound.
ovn-controller is a stand-in of its control socket (the real one:
``tests/functional/test_ovn_health.py``)."""
from __future__ import annotations

import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from oslo_config import cfg

from kuryr_supervisor.cni.ovsdb import MARK, openflow
from kuryr_supervisor.conf import binding as binding_conf
from kuryr_supervisor.health.checks.ovn import DatapathCheck, FlowsCheck
from kuryr_supervisor.health.checks.ovsdb import OvsdbCheck, connection
from tests.fixtures.daemon import wait_until
from tests.fixtures.ovs import PrivateOVS
from tests.fixtures.unixctl import Unixctl

pytestmark = pytest.mark.privileged


@pytest.fixture
def ovs() -> Iterator[PrivateOVS]:
    switch = PrivateOVS().start()
    yield switch
    switch.close()


def ofctl(ovs: PrivateOVS, *args: str) -> str:
    return subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", *args],
                          check=True, capture_output=True, text=True,
                          env=ovs.env).stdout


def test_flows_and_datapath_on_a_real_switch(ovs: PrivateOVS,
                                             tmp_path: Path) -> None:
    bridge = "ksvd" + secrets.token_hex(4)
    port = "ksv" + secrets.token_hex(6)
    ovs.add_bridge(bridge)
    ovs.vsctl("set", "open_vswitch", ".", "external_ids:ovn-remote=unix:/sb")
    ovs.vsctl("add-port", bridge, port, "--", "set", "Interface", port,
              "type=internal", f"external_ids:{MARK[0]}={MARK[1]}",
              "external_ids:ovn-installed=true")
    ofport = int(ovs.vsctl("get", "Interface", port, "ofport"))
    mgmt = f"{ovs.dir}/{bridge}.mgmt"
    ofctl(ovs, "add-flow", f"unix:{mgmt}",
          f"table=0,priority=100,in_port={ofport},actions=drop")
    assert openflow.flow_counts(mgmt, [ofport, ofport + 1]) == {
        ofport: 1, ofport + 1: 0}

    conf = cfg.ConfigOpts()
    binding_conf.register_opts(conf)
    conf([], default_config_files=[])
    for key, value in (("ovsdb_connection", ovs.connection),
                       ("ovs_bridge", bridge), ("ovsdb_timeout", 2.0),
                       ("ovn_rundir", str(tmp_path))):
        conf.set_override(key, value, "binding")
    db = connection(conf)
    held = OvsdbCheck(conf, db)
    flows, datapath = FlowsCheck(conf, db), DatapathCheck(conf, db)
    ctl = Unixctl(tmp_path, "ovn-controller",
                  {"coverage/read-counter lflow_run": "3"}).start()
    try:
        assert held.run(0).ok
        wait_until(lambda: flows.run(0).ok, 10)
        assert flows.run(0).message == (f"{bridge} holds the flows of all 1 "
                                        "ports OVN installed")
        assert datapath.run(0).message == f"{bridge} on datapath " \
                                          "netdev@ovs-netdev"

        ofctl(ovs, "del-flows", f"unix:{mgmt}")
        result = flows.run(0)
        assert not result.ok
        assert result.message == (f"{bridge} has no flows for 1 of 1 ports "
                                  f"OVN installed ({port}): their pods have "
                                  "no network")

        # ovs-vswitchd stopped (its sockets still accept): both fail within
        # their bounds, naming it.
        assert ovs.vswitchd is not None
        ovs.vswitchd.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            result = datapath.run(0)
            assert time.monotonic() - started < 2.0
            assert not result.ok
            assert result.message.startswith(
                "ovs-vswitchd does not answer on its control socket")
            started = time.monotonic()
            result = flows.run(0)
            assert time.monotonic() - started < 3.0
            assert not result.ok and "cannot read" in result.message
        finally:
            ovs.vswitchd.send_signal(signal.SIGCONT)
        assert datapath.run(0).ok
    finally:
        ctl.close()
        held.db.close()
