"""The health manager checks the service path, on the real OVN stack with
the real Octavia (its OVN provider): the controller with the port
handler, the judge, the canaries and the services handler; our daemon on
each of the stack's two nodes, their canaries on the Octavia fixture's
pod network (a router joins it to the service network, as a cluster's
pods and Services are).

* the canary handler makes the canary Service (``kube-system/
  kuryr-canary``: no selector, its EndpointSlice of its own listing the
  canaries), the services handler its load balancer, and every node's
  canary reaches its VIP (its ``/status``, its record);
* on one node the load balancer's flows are deleted from ``br-int``
  (every OpenFlow flow whose match names the VIP, in that node's
  namespace, again each second while the fault lasts: ovn-controller
  installs them again only at a recompute) → that node alone
  is judged: readiness fails (``network-verdict``), CNI STATUS 51, its
  conditions ``KuryrServicePathBroken`` and ``NetworkUnavailable``, its
  canary out of the Service's endpoints, the other node untouched; the
  flows back (ovn-controller restarted) clear it all;
* the load balancer gone from the OVN Northbound database for every node
  (its VIP taken out of its ``Load_Balancer`` row) → a cluster-wide fault
  of kind ``services`` (a ``ClusterNetworkFault`` Event naming Octavia,
  the judge's word in every record), and no Node condition moves, no
  STATUS fails, every node stays ready; the VIP put back clears it.
"""
from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.netcheck.codecs import conditions as nc
from kuryr_supervisor.netcheck.judge import canaryservice as cs
from tests.fixtures.ovn import health
from tests.fixtures.ovn.cni import Cluster
from tests.fixtures.ovn.health import (
    OWN,
    all_healthy,
    canary,
    conditions,
    describe,
    events,
    failing_check,
    ready,
    status,
)
from tests.fixtures.ovn.lb import OvnOctavia, log
from tests.fixtures.ovn.node import Node
from tests.fixtures.ovn.stack import OvnStack, wait_for

pytestmark = [pytest.mark.privileged, pytest.mark.realcloud]

JUDGE = {"fault_after": 2.0, "recover_after": 3.0, "cluster_settle": 4.0,
         "correlation": 5.0, "judge_interval": 0.5, "verdict_lifetime": 10,
         "canary_resync_interval": 5.0, "probe_interval": 1.0,
         "canary_peers": 2, "release_on_stop": True}
HANDLERS = "neutron_port,network_health,network_canary,services"
REASON = "KuryrServicePathBroken"


@pytest.fixture
def cluster(ovn_stack: OvnStack, ovn_octavia: OvnOctavia,
            tmp_path: Path) -> Iterator[Cluster]:
    with ovn_stack.in_catalog():
        made = Cluster(
            ovn_stack, tmp_path, lambda: "",
            cni_options={"network_health": {"record_min_interval": 0.5,
                                            "probe_timeout": 0.5}},
            controller_options={
                "controller": {"handlers": HANDLERS,
                               "pod_network_id": ovn_octavia.pod_network_id,
                               "pod_subnet_id": ovn_octavia.pod_subnet_id},
                "network_health": JUDGE,
                "node_port": {"enabled": False},
                "services": {"service_subnet_id":
                             ovn_octavia.service_subnet_id,
                             "resync_interval": 10.0,
                             "settle_timeout": 30.0}})
        # The API server allocates the canary Service's clusterIP from
        # the cluster's service range: the service subnet's.
        made.api.service_cidr = ovn_octavia.service_cidr
        try:
            yield made.start()
        finally:
            made.close()


def vip(c: Cluster) -> str:
    return str(c.api.services[(cs.NAMESPACE, cs.NAME)]["spec"]["clusterIP"])


def reaches_vip(c: Cluster, node: Node) -> bool:
    doc = canary(c, node).get("service") or {}
    record = (c.api.nodenetworks[node.name].get("status") or {})
    return bool(doc.get("reached")) and doc.get("tcp") is True and \
        (record.get("service") or {}).get("reached") is True


def healthy(c: Cluster, stack: OvnStack) -> None:
    wait_for(lambda: all_healthy(c, stack) and all(
        reaches_vip(c, n) for n in stack.fabric.nodes), 120,
        lambda: "every node healthy, reaching the VIP: " + describe(c, stack)
        + "; " + "; ".join(str(canary(c, n).get("service"))
                           for n in stack.fabric.nodes))


def ofctl(node: Node, *args: str) -> str:
    return subprocess.run(["ovs-ofctl", *args], check=True,
                          capture_output=True, text=True,
                          env=node.ovs.env).stdout


class VipFlowsGone:
    """On ``node``, every OpenFlow flow whose match names ``address``
    (the load balancer's, in the switch's and the router's pipelines),
    each deleted by its exact match, now and again each second until
    :meth:`stop` (a recompute of ovn-controller would install them
    again); every other flow stays."""

    def __init__(self, node: Node, address: str) -> None:
        self.node, self.bridge = node, f"unix:{node.rundir}/br-int.mgmt"
        packed = "0x" + "".join(f"{int(b):02x}" for b in address.split(
            ".")).lstrip("0")
        self.names = re.compile(rf"=({re.escape(address)}|{packed})"
                                rf"(?![\d.xa-f])")
        self.deleted: set[str] = set()
        self._stop = threading.Event()
        self.delete()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def delete(self) -> int:
        matches = set()
        for line in ofctl(self.node, "--no-stats", "dump-flows",
                          self.bridge).splitlines():
            match = line.split(" actions=")[0]
            if not self.names.search(match):
                continue
            matches.add(",".join(part.strip() for part in match.split(",")
                                 if not part.strip().startswith("cookie=")))
        for match in matches:
            ofctl(self.node, "--strict", "del-flows", self.bridge, match)
        self.deleted |= matches
        return len(matches)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.delete()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def nb_load_balancer(octavia: OvnOctavia, address: str
                     ) -> tuple[str, dict[str, str]]:
    """The NB Load_Balancer whose VIPs hold ``address``: (uuid, vips)."""
    central = octavia.stack.fabric.central
    doc = json.loads(central.nbctl("--format=json", "--columns=_uuid,vips",
                                   "list", "Load_Balancer"))
    for uuid_, vips in doc["data"]:
        pairs = dict(vips[1])
        if any(k.split(":")[0] == address for k in pairs):
            return uuid_[1], pairs
    raise AssertionError(f"no NB Load_Balancer for {address}: {doc}")


def test_the_service_path_one_node_and_every_node(
        ovn_stack: OvnStack, ovn_octavia: OvnOctavia,
        cluster: Cluster) -> None:
    c, nodes = cluster, ovn_stack.fabric.nodes
    started = time.monotonic()
    healthy(c, ovn_stack)
    log(f"canary Service reached through its VIP from every node in "
        f"{time.monotonic() - started:.1f} s")
    address = vip(c)
    svc = c.api.services[(cs.NAMESPACE, cs.NAME)]
    assert "selector" not in svc["spec"]
    eps = c.api.endpointslices[(cs.NAMESPACE, cs.NAME)]
    assert eps["metadata"]["labels"][
        "endpointslice.kubernetes.io/managed-by"] == "kuryr-supervisor"
    assert sorted(e["nodeName"] for e in eps["endpoints"]) == sorted(
        n.name for n in nodes)
    for node in nodes:
        spec = c.api.nodenetworks[node.name]["spec"]
        assert spec["canaryService"] == {"address": address, "port": 8094}
    nb_load_balancer(ovn_octavia, address)      # the provider made it

    # -- one node's load-balancer flows gone --------------------------------
    broken, other = nodes
    start = time.time()
    gone = VipFlowsGone(broken, address)
    try:
        assert gone.deleted, f"no flow of {broken.name} names {address}"
        wait_for(lambda: failing_check(c, broken, "network-verdict")
                 is not None, 40,
                 lambda: f"{broken.name}'s readiness failing: "
                         f"{ready(c, broken)}; {describe(c, ovn_stack)}")
        line = failing_check(c, broken, "network-verdict")
        assert line is not None and REASON in line
        wait_for(lambda: status(c, broken)[0] == 51, 20,
                 lambda: f"STATUS 51 on {broken.name}: "
                         f"{status(c, broken)}")
        assert REASON in status(c, broken)[1]
        wait_for(lambda: conditions(c, broken) == (
            ("False", REASON), ("True", nc.REASON_FAULT)), 20,
            lambda: f"{broken.name} marked: {conditions(c, broken)}")
        log(f"{broken.name}'s service path broken -> its conditions in "
            f"{time.time() - start:.1f} s")
        # Its probe of the VIP fails while the flows stay deleted (the
        # loop deletes them each second; ovn-controller may put them back
        # between two deletions, so a probe may pass now and then).
        wait_for(lambda: canary(c, broken)["service"]["reached"] is False,
                 20, lambda: f"{broken.name}'s VIP probe: "
                             f"{canary(c, broken)['service']}")
        # Judged faulty, it leaves the canary Service's endpoints.
        wait_for(lambda: {e["nodeName"] for e in c.api.endpointslices[
            (cs.NAMESPACE, cs.NAME)]["endpoints"]} == {other.name}, 20,
            f"only {other.name}'s canary behind the VIP")
        # Its own checks still pass: only the VIP is unreachable there.
        body = ready(c, broken)[1]
        assert "[-]flows" not in body and "[-]ovn-controller" not in body
        # The other node is untouched.
        assert reaches_vip(c, other) and ready(c, other)[0]
        assert status(c, other)[0] == 0
        assert conditions(c, other)[0] == ("True", OWN)
    finally:
        gone.stop()
        health._restart(broken)       # ovn-controller installs them again
    healthy(c, ovn_stack)
    wait_for(lambda: conditions(c, broken)[0] == ("True", OWN), 30,
             lambda: f"{broken.name} healthy again: "
                     f"{conditions(c, broken)}")
    told = [(r, n) for r, n, _ in events(c, start)]
    assert ("NodeNetworkFault", broken.name) in told, told
    assert not any(r == "ClusterNetworkFault" for r, _ in told), told

    # -- the load balancer gone from OVN NB for every node ---------------
    # The node judged faulty left the endpoints and is back: its canary a
    # member again (the provider's write done) before the fault.
    def members() -> int:
        backends = nb_load_balancer(ovn_octavia, address)[1].values()
        return sum(len(v.split(",")) for v in backends if v)
    wait_for(lambda: members() == len(nodes), 60,
             lambda: f"every canary behind the VIP in the NB: "
                     f"{nb_load_balancer(ovn_octavia, address)}")
    uuid_, vips = nb_load_balancer(ovn_octavia, address)
    central = ovn_stack.fabric.central
    start = time.time()
    samples: list[tuple[Any, ...]] = []
    central.nbctl("clear", "Load_Balancer", uuid_, "vips")
    try:
        def declared() -> bool:
            samples.append(tuple((conditions(c, n)[0], status(c, n)[0],
                                  ready(c, n)[0]) for n in nodes))
            return all(((c.api.nodenetworks[n.name]["spec"].get("cluster")
                         or {}).get("fault") == "services") for n in nodes)
        wait_for(declared, 40, lambda: "a cluster-wide fault of kind "
                 "services in every record: " + describe(c, ovn_stack))
        log(f"the load balancer gone for every node -> cluster-wide in "
            f"{time.time() - start:.1f} s")
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            declared()
            time.sleep(0.5)
        for node in nodes:
            assert canary(c, node)["service"]["reached"] is False
    finally:
        central.nbctl("set", "Load_Balancer", uuid_, "vips={" + ",".join(
            f'"{k}"="{v}"' for k, v in vips.items()) + "}")
    healthy(c, ovn_stack)
    # No condition moved, no STATUS failed, every node stayed ready.
    for sample in samples:
        for cond, code, is_ready in sample:
            assert cond == ("True", OWN) and code == 0 and is_ready, sample
    told = events(c, start)
    assert not any(r == "NodeNetworkFault" for r, _, _ in told), told
    faults = [m for r, _, m in told if r == "ClusterNetworkFault"]
    assert faults and "Octavia" in faults[0], told
    # No ERROR line, no traceback, in the controller's log or the nodes'.
    assert c.controller is not None
    logs = {"controller": c.controller.log_path.read_text(errors="replace"),
            **{n: d.log_path.read_text(errors="replace")
               for n, d in c.daemons.items()}}
    for name, text in logs.items():
        bad = [line for line in text.splitlines()
               if " ERROR " in line or "Traceback" in line]
        assert not bad, (name, bad[:5])
