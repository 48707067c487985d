"""Network health end to end on the real OVN stack: three simulated nodes
(the judge needs a majority), each running our daemon with the OVS
binding, the controller with the port handler, the network judge and the
canaries, against the ML2/OVN Neutron; a router on the pod subnet, so the
canaries' gateway answers.

One stack and one cluster for the whole module. First the canaries come
up (a port per node, plugged, probing its gateway and its peers); then
each fault is injected and undone in turn, and what each says is checked
(the node's readiness, CNI STATUS, the Node conditions and Events in the
fake API), and that all of it clears:

* local, on one node: ovn-controller stopped; its Southbound connection
  cut; br-int's flows deleted; its tunnel endpoint down; its canary's
  port deleted in Neutron (the controller makes another);
* cluster-wide: the Southbound database stopped; Neutron stopped.

Last, magnum-auto-healer's NodeCondition rule replayed on the Node lists
taken every second meanwhile (its durations scaled down to the test's
faults): a local fault gets that node alone repaired, a cluster-wide
fault none. The judge's timings are shortened (faults after 2 s,
recoveries after 3 s); the ``health`` benchmark measures the defaults.
"""
from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.kubernetes import netconditions as nc
from tests.fixtures.autohealer import AutoHealer, NodeConditionCheck
from tests.fixtures.ovn.cni import Cluster
from tests.fixtures.ovn.fabric import available
from tests.fixtures.ovn.node import Node
from tests.fixtures.ovn.stack import OvnStack, wait_for
from tests.fixtures.realcloud import RealCloud
from tests.functional.cni_harness import run_shim

pytestmark = [pytest.mark.privileged, pytest.mark.realcloud]

OWN = nc.DEFAULT_TYPE
JUDGE = {"fault_after": 2.0, "recover_after": 3.0, "cluster_settle": 4.0,
         "correlation": 5.0, "judge_interval": 0.5,
         "canary_resync_interval": 5.0, "probe_interval": 1.0,
         "canary_peers": 2}

Timeline = list[tuple[float, list[dict[str, Any]]]]


@pytest.fixture(scope="module")
def stack(real_cloud: RealCloud) -> Iterator[OvnStack]:
    why = available()
    if why:
        pytest.skip(f"OVN data plane unavailable: {why}")
    stack = OvnStack(real_cloud, nodes=3).start()
    try:
        router = stack.admin("POST", "/v2.0/routers", {"router": {
            "name": "pods-ovn", "project_id": real_cloud.project_id}}
        ).expect(201)["router"]
        stack.admin("PUT", f"/v2.0/routers/{router['id']}/add_router_interface",
                    {"subnet_id": stack.subnet_id}).expect(200)
        yield stack
    finally:
        stack.close()


class Recorder:
    """Every Node of the fake API listed each second (the auto-healer's
    timeline), on a thread of its own."""

    def __init__(self, cluster: Cluster) -> None:
        self.api = cluster.api
        self.timeline: Timeline = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            with self.api.cond:
                nodes = copy.deepcopy(list(self.api.nodes.values()))
            self.timeline.append((time.time(), nodes))

    def since(self, start: float) -> Timeline:
        return [(t, n) for t, n in self.timeline if t >= start]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture(scope="module")
def cluster(stack: OvnStack, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Cluster]:
    with stack.in_catalog():
        cluster = Cluster(
            stack, tmp_path_factory.mktemp("health"), lambda: "",
            cni_options={"network_health": {"record_min_interval": 0.5,
                                            "probe_timeout": 0.5}},
            controller_groups={
                "controller": {"handlers": "neutron_port,network_health,"
                                           "network_canary"},
                "network_health": JUDGE})
        try:
            yield cluster.start()
        finally:
            cluster.close()


@pytest.fixture(scope="module")
def recorder(cluster: Cluster) -> Iterator[Recorder]:
    rec = Recorder(cluster)
    yield rec
    rec.stop()


# -- what each says --------------------------------------------------------------
def canary(cluster: Cluster, node: Node) -> dict[str, Any]:
    return dict(cluster.daemons[node.name].status()["network"]["canary"])


def status(cluster: Cluster, node: Node) -> tuple[int, str]:
    """CNI STATUS on ``node``, as a runtime on libcni 1.2 asks it: (0, "")
    or (code, message)."""
    code, out = run_shim(cluster.shim, "STATUS", {
        **cluster.netconf(node), "cniVersion": "1.1.0"})
    return (0, "") if code == 0 else (int(out["code"]), str(out["msg"]))


def ready(cluster: Cluster, node: Node) -> tuple[bool, str]:
    code, body = cluster.daemons[node.name].get("/ready?verbose")
    return code == 200, body


def conditions(cluster: Cluster, node: Node) -> tuple[Any, Any]:
    """(our type's status and reason, NetworkUnavailable's)."""
    own = cluster.api.condition(node.name, OWN) or {}
    unavailable = cluster.api.condition(node.name, nc.NETWORK_UNAVAILABLE) \
        or {}
    return ((own.get("status"), own.get("reason")),
            (unavailable.get("status"), unavailable.get("reason")))


def events(cluster: Cluster, since: float) -> list[tuple[str, str, str]]:
    """(reason, involved object's name, message) of the Events since."""
    out = []
    with cluster.api.cond:
        for event in cluster.api.core_events.values():
            stamp = str(event.get("lastTimestamp") or "")
            out.append((stamp, event["reason"],
                        event["involvedObject"]["name"], event["message"]))
    cut = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(since - 1))
    return [(r, n, m) for stamp, r, n, m in sorted(out) if stamp[:19] >= cut]


def healthy(cluster: Cluster, stack: OvnStack) -> None:
    """Every node ready, STATUS success, conditions healthy, every canary
    up reaching its gateway and both peers."""
    def fine() -> bool:
        for node in stack.fabric.nodes:
            doc = canary(cluster, node)
            peers = [p["reached"] for p in doc["peers"]]
            if not (ready(cluster, node)[0] and status(cluster, node)[0] == 0
                    and doc["up"] and peers == [True, True]
                    and (doc["gateway"] or {}).get("reached")
                    and conditions(cluster, node)[0] == ("True", OWN)):
                return False
        return True
    wait_for(fine, 90, lambda: "every node healthy: " + "; ".join(
        f"{n.name}: ready {ready(cluster, n)}, status "
        f"{status(cluster, n)}, canary {canary(cluster, n)}, conditions "
        f"{conditions(cluster, n)}" for n in stack.fabric.nodes))


def test_every_node_probes_from_a_canary_of_its_own(
        stack: OvnStack, cluster: Cluster, recorder: Recorder) -> None:
    healthy(cluster, stack)
    ports = stack.admin("GET", "/v2.0/ports",
                        device_owner="compute:kuryr-canary").expect(200)["ports"]
    assert sorted(p["binding:host_id"] for p in ports) == sorted(
        n.name for n in stack.fabric.nodes)
    for port in ports:
        assert port["status"] == "ACTIVE"
        assert port["network_id"] == stack.network_id
    for node in stack.fabric.nodes:
        doc = canary(cluster, node)
        assert doc["icmp"] is True and doc["interval"] == 1.0
        for peer in doc["peers"]:
            assert peer["icmp"] and peer["tcp"], doc
        record = cluster.api.nodenetworks[node.name]["status"]
        assert record["canary"]["portId"] == doc["port"]
        assert record["gateway"]["reached"] is True
        assert [p["reached"] for p in record["peers"]] == [True, True]
        metrics = cluster.daemons[node.name].metrics()
        assert metrics[("kuryr_supervisor_canary_up", ())] == 1.0
        assert metrics[("kuryr_supervisor_canary_peers",
                        (("state", "reached"),))] == 2.0
