"""The node's side of network health, in a real CNI daemon on a private
Open vSwitch in Kubernetes mode, against the fake API over real HTTP: CNI
STATUS (through the shim, as a runtime execs it) and the node's
NodeNetwork record both follow the daemon's data-plane checks (``ovsdb``
and ``datapath``: the integration bridge deleted, then back), and uninstalling releases
the record and the judge's conditions on the node."""
from __future__ import annotations

import re
import secrets
import signal
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.netcheck.codecs import conditions as nc
from kuryr_supervisor.netcheck.codecs import record as nn
from tests.fixtures.controller import Cloud, subnet_cloud_fixture
from tests.fixtures.daemon import Daemon, wait_until
from tests.fixtures.ovs import PrivateOVS
from tests.functional.cni_harness import install_shim, run_shim
from tests.functional.ovs_harness import NODE, cni_daemon, netconf, ovs_fixture

pytestmark = pytest.mark.privileged

cloud = pytest.fixture(subnet_cloud_fixture)
ovs = pytest.fixture(ovs_fixture)


def record(cloud: Cloud) -> nn.Record | None:
    obj = cloud.api.nodenetworks.get(NODE)
    try:
        return nn.from_object(obj) if obj else None
    except ValueError:                  # created, status not written yet
        return None


def ovsdb_ok(cloud: Cloud) -> bool | None:
    found = record(cloud)
    checks = {c.name: c.ok for c in found.report.checks} if found else {}
    return checks.get("ovsdb")


def status(shim: str, d: Daemon) -> tuple[int, Any]:
    return run_shim(shim, "STATUS", {**netconf(d), "cniVersion": "1.1.0"})


def metric(d: Daemon, name: str) -> float:
    body = d.get("/metrics")[1]
    found = re.search(rf"^kuryr_supervisor_{name} (\S+)$", body, re.M)
    assert found, body
    return float(found.group(1))


def test_status_and_the_record_follow_the_data_plane(
        tmp_path: Path, cloud: Cloud, ovs: PrivateOVS) -> None:
    bridge = "ksvn" + secrets.token_hex(4)
    ovs.add_bridge(bridge)
    cloud.api.add_node(NODE)
    d = cni_daemon(tmp_path / "cni", cloud, ovs, bridge)
    d.options["network_health"] = {"record_min_interval": 0.2}
    d.options["cni_install"] = {"uninstall_on_stop": True}
    d.write_config()
    shim = install_shim(str(tmp_path))
    try:
        d.start()
        d.wait_ready()
        assert status(shim, d) == (0, None)
        wait_until(lambda: ovsdb_ok(cloud) is True, 10)
        found = record(cloud)
        assert found is not None and found.report.daemon.ready
        assert found.heartbeat_seconds == 60
        owner = cloud.api.nodenetworks[NODE]["metadata"]["ownerReferences"][0]
        assert owner["uid"] == cloud.api.nodes[NODE]["metadata"]["uid"]
        assert metric(d, "cni_status_code") == 0

        # The pods' bridge is gone: ADDs cannot be served (ovsdb) and the
        # running pods' ports went with it (datapath): 51, both named.
        ovs.vsctl("del-br", bridge)
        code, err = wait_until(lambda: (lambda r: r if r[0] else None)(
            status(shim, d)), 15)
        assert err["code"] == 51 and err["msg"].startswith("ovsdb: "), err
        assert f"datapath: ovs-vswitchd has no datapath for {bridge}" in \
            err["msg"]
        wait_until(lambda: ovsdb_ok(cloud) is False, 10)
        assert metric(d, "cni_status_code") == 51
        assert d.probe("/alive") == 200

        ovs.add_bridge(bridge)
        wait_until(lambda: status(shim, d) == (0, None), 15)
        wait_until(lambda: ovsdb_ok(cloud) is True, 10)

        # Counted once the write's answer is back, a moment after the API
        # has the record: the first, the fault's and the recovery's.
        def writes_ok() -> float:
            found = re.search(r'network_record_writes_total{result="ok"} '
                              r'(\S+)', d.get("/metrics")[1])
            return float(found.group(1)) if found else 0.0
        wait_until(lambda: writes_ok() >= 3, 5)

        # Uninstalling: the judge had marked this node; a graceful stop
        # with uninstall_on_stop releases it all.
        cloud.api.set_node_condition(NODE, {
            "type": nc.DEFAULT_TYPE, "status": "False",
            "reason": "KuryrPeersUnreachable"})
        cloud.api.set_node_condition(NODE, {
            "type": nc.NETWORK_UNAVAILABLE, "status": "True",
            "reason": nc.REASON_FAULT})
        d.signal(signal.SIGTERM)
        assert d.wait_exit(30) == 0
        assert NODE not in cloud.api.nodenetworks
        assert cloud.api.condition(NODE, nc.DEFAULT_TYPE) is None
        unavailable = cloud.api.condition(NODE, nc.NETWORK_UNAVAILABLE)
        assert unavailable is not None
        assert unavailable["reason"] == nc.REASON_RELEASED, d.log()
    finally:
        d.close()
