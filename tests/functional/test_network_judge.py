"""The network judge in a real controller daemon (``handlers =
network_health``) against the fake Kubernetes API over real HTTP, the
nodes played by hand: their NodeNetwork records written as their daemons
would. What the Nodes' conditions, the Events and ``/metrics`` say, a
cluster-wide fault that changes no condition, and the release a graceful
stop makes when uninstalling.

Fake only: the rules are the judge's own, no cloud changes them (the real
OVN stack feeds it through the nodes' daemons, as their own tests show)."""
from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.netcheck.codecs import conditions as nc
from kuryr_supervisor.netcheck.codecs import record as nn
from tests.fixtures.controller import Cloud, cloud_fixture, controller_daemon
from tests.fixtures.daemon import Daemon, wait_until

pytestmark = pytest.mark.privileged

cloud = pytest.fixture(cloud_fixture)
NODES = ("node-a", "node-b", "node-c", "node-d", "node-e")
OWN = nc.DEFAULT_TYPE
#: The judge's timings, shortened (their defaults are 10 s, 30 s and 60 s).
FAST = {"fault_after": 0.5, "recover_after": 1.0, "daemon_grace": 1.0,
        "cluster_settle": 1.0, "correlation": 0.2, "judge_interval": 0.2,
        "resync_interval": 5.0}


def write(cloud: Cloud, node: str, ok: bool = True) -> None:
    rep = nn.NetworkReport(nn.Daemon(True, time.time(), "live, ready"),
                           (nn.LocalCheck("ovn-controller", ok,
                                          "connected" if ok else "down"),))
    cloud.api.put_nodenetwork(node, nn.status(rep, heartbeat_seconds=60,
                                              wall=time.time()))


def cond(cloud: Cloud, node: str, kind: str = OWN) -> dict[str, Any]:
    return cloud.api.condition(node, kind) or {}


def metric(d: Daemon, name: str, labels: str) -> float | None:
    body = d.get("/metrics")[1]
    found = re.search(rf"^kuryr_supervisor_{name}{{{labels}}} (\S+)$", body,
                      re.M)
    return float(found.group(1)) if found else None


def events(cloud: Cloud, reason: str) -> list[dict[str, Any]]:
    return [e for e in list(cloud.api.core_events.values())
            if e["reason"] == reason]


@pytest.fixture
def judge(tmp_path: Path, cloud: Cloud) -> Iterator[Daemon]:
    for node in NODES:
        cloud.api.add_node(node)
        cloud.api.set_node_condition(node, {
            "type": nc.NETWORK_UNAVAILABLE, "status": "False",
            "reason": "RouteCreated"})
        write(cloud, node)
    d = controller_daemon(tmp_path, cloud, {
        "controller": {"handlers": "network_health"},
        "network_health": {**FAST, "release_on_stop": True}})
    d.start()
    yield d
    d.close()


def test_a_local_fault_then_a_cluster_wide_one(judge: Daemon,
                                               cloud: Cloud) -> None:
    judge.wait_ready()
    wait_until(lambda: all(cond(cloud, n).get("status") == "True"
                           for n in NODES), 10)
    # node-c's ovn-controller goes down: that node alone.
    write(cloud, "node-c", ok=False)
    wait_until(lambda: cond(cloud, "node-c").get("status") == "False", 10)
    assert cond(cloud, "node-c")["reason"] == "KuryrLocalCheckFailed"
    unavailable = cond(cloud, "node-c", nc.NETWORK_UNAVAILABLE)
    assert (unavailable["status"], unavailable["reason"]) == (
        "True", nc.REASON_FAULT)
    assert all(cond(cloud, n)["status"] == "True" for n in NODES
               if n != "node-c")
    wait_until(lambda: events(cloud, "NodeNetworkFault"), 5)
    assert metric(judge, "network_node_local_fault",
                  'node="node-c",reason="KuryrLocalCheckFailed"') == 1.0
    write(cloud, "node-c")
    wait_until(lambda: cond(cloud, "node-c").get("status") == "True", 10)
    assert cond(cloud, "node-c", nc.NETWORK_UNAVAILABLE)["reason"] == \
        nc.REASON_RECOVERED
    # The Southbound database goes down: most nodes at once.
    patches = len(cloud.api.patches)
    before = {n: cond(cloud, n) for n in NODES}
    for node in ("node-a", "node-b", "node-c"):
        write(cloud, node, ok=False)
    wait_until(lambda: metric(judge, "network_cluster_fault",
                              'kind="ovn-controller"') == 1.0, 10)
    wait_until(lambda: events(cloud, "ClusterNetworkFault"), 5)
    # Told to every node in its record (their CNI STATUS spares it).
    wait_until(lambda: all(
        cloud.api.nodenetworks[n]["spec"].get("cluster", {}).get("fault")
        == "ovn-controller" for n in NODES), 5)
    time.sleep(10 * FAST["fault_after"])      # long past a local verdict
    assert len(cloud.api.patches) == patches
    assert {n: cond(cloud, n) for n in NODES} == before
    for node in ("node-a", "node-b", "node-c"):
        write(cloud, node)
    wait_until(lambda: metric(judge, "network_cluster_fault",
                              'kind="ovn-controller"') == 0.0, 10)
    assert len(cloud.api.patches) == patches


def test_uninstall_releases_every_condition(judge: Daemon,
                                            cloud: Cloud) -> None:
    judge.wait_ready()
    write(cloud, "node-d", ok=False)
    wait_until(lambda: cond(cloud, "node-d").get("status") == "False", 10)
    # The judge's verdict on node-d is in its record, nobody else's.
    wait_until(lambda: "node" in cloud.api.nodenetworks["node-d"]["spec"][
        "cluster"], 5)
    assert cloud.api.nodenetworks["node-d"]["spec"]["cluster"]["node"][
        "reason"] == "KuryrLocalCheckFailed"
    assert all(cloud.api.nodenetworks[n]["spec"]["cluster"] == {}
               for n in NODES if n != "node-d")
    judge.signal(signal.SIGTERM)
    assert judge.wait_exit(30) == 0
    # The judge's word is gone from the records: no node spares its STATUS.
    assert not any("cluster" in cloud.api.nodenetworks[n]["spec"]
                   for n in NODES)
    assert all(cloud.api.condition(n, OWN) is None for n in NODES), judge.log()
    unavailable = cond(cloud, "node-d", nc.NETWORK_UNAVAILABLE)
    assert (unavailable["status"], unavailable["reason"]) == (
        "False", nc.REASON_RELEASED)
    assert cond(cloud, "node-a", nc.NETWORK_UNAVAILABLE)["reason"] == \
        "RouteCreated"


def test_records_of_no_node_steer_nothing(judge: Daemon, cloud: Cloud) -> None:
    """A node's daemon writes four records named after no Node, each
    failing a check, while node-c has a local fault: no cluster-wide
    fault is declared, node-c's fault stands, no other node is told
    anything, the ghosts get no verdict; the controller says so once per
    name."""
    judge.wait_ready()
    write(cloud, "node-c", ok=False)
    wait_until(lambda: cond(cloud, "node-c").get("status") == "False", 10)
    ghosts = [f"ghost-{i}" for i in range(4)]
    for ghost in ghosts:
        write(cloud, ghost, ok=False)
    time.sleep(20 * FAST["judge_interval"])
    assert not events(cloud, "ClusterNetworkFault")
    assert metric(judge, "network_cluster_fault",
                  'kind="ovn-controller"') in (None, 0.0)
    assert cond(cloud, "node-c")["reason"] == "KuryrLocalCheckFailed"
    assert all(cond(cloud, n)["status"] == "True" for n in NODES
               if n != "node-c")
    for ghost in ghosts:
        assert "cluster" not in cloud.api.nodenetworks[ghost]["spec"]
    for node in NODES:
        assert cloud.api.nodenetworks[node]["spec"]["cluster"].get(
            "fault", "") == ""
    log = judge.log()
    for ghost in ghosts:
        assert log.count(f"NodeNetwork record {ghost} names no Node") == 1, log
