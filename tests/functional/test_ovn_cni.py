"""End to end on Neutron's own data plane: our CNI daemon with the OVS
binding on two simulated OVN nodes, the controller role against the real
Keystone and the ML2/OVN Neutron (tests/fixtures/ovn/).

The controller makes each pod's port (``binding:host_id`` = the pod's node)
and keeps its status in the PodPort; each node's daemon (Kubernetes mode,
the fake API) plugs the pod into its ``br-int``, ovn-controller claims the
port and installs its flows, and ADD returns only once the Interface says
``ovn-installed`` (the node picks that barrier itself). Proves: the flows
installed when ADD returns, the ports ACTIVE and bound to the right host;
a port that cannot be installed (ovn-controller stopped) gets code 11
naming ovn-controller, never counted, its interface removed; ping and TCP between
pods on different nodes through Geneve; a security group that drops does
drop; a worker killed and a daemon restarted in between lose nothing; DEL
takes the interface off ``br-int`` and the port goes DOWN.
"""
from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.cni.binding import BridgeBinding
from tests.fixtures.ovn.cni import Cluster
from tests.fixtures.ovn.fabric import Pod, ping, received, tcp_transfer
from tests.fixtures.ovn.stack import OvnStack, wait_for
from tests.functional.cni_harness import Namespaces

pytestmark = [pytest.mark.privileged, pytest.mark.realcloud]


def installed(pod: Pod) -> bool:
    """``external_ids:ovn-installed="true"`` on the pod's Interface."""
    return pod.node.vsctl("--if-exists", "get", "Interface", pod.ovs_port,
                          "external_ids:ovn-installed") == '"true"'


@pytest.fixture
def cluster(ovn_stack: OvnStack, tmp_path: Path,
            namespaces: Namespaces) -> Iterator[Cluster]:
    with ovn_stack.in_catalog():
        cluster = Cluster(ovn_stack, tmp_path, namespaces.create)
        try:
            yield cluster.start()
        finally:
            cluster.close()


def test_pods_on_two_nodes_through_our_cni(ovn_stack: OvnStack,
                                           cluster: Cluster) -> None:
    node1, node2 = ovn_stack.fabric.nodes
    tag = uuid.uuid4().hex[:6]

    # ADD returns once ovn-controller installed the port's flows (the
    # node chose the ovn-installed barrier itself); Neutron says ACTIVE,
    # bound to the pod's node.
    port_a, pod_a = cluster.add(f"a-{tag}", node1)
    port_b, pod_b = cluster.add(f"b-{tag}", node2)
    for (port, pod), node in (((port_a, pod_a), node1),
                              ((port_b, pod_b), node2)):
        assert installed(pod), pod.node.vsctl("list", "Interface",
                                              pod.ovs_port)
        port = ovn_stack.wait_port(port["id"], "ACTIVE", 10)
        assert port["binding:host_id"] == node.name
        assert port["binding:vif_type"] == "ovs"
    assert "ADD waits for ovn-installed" in cluster.daemons[
        node1.name].log_path.read_text()
    for pod in (pod_a, pod_b):
        assert pod.ovs_port in pod.node.vsctl("list-ports", "br-int").split()

    # Ping and TCP across nodes, over the underlay (Geneve).
    before = ovn_stack.fabric.underlay_bytes(node1)
    ovn_stack.fabric.wait_ping(pod_a, pod_b)
    assert received(ping(pod_a, pod_b.address, count=3)) == 3
    transfer = tcp_transfer(pod_a, pod_b, 10_000_000)
    assert transfer.received == transfer.sent == 10_000_000
    assert transfer.received_digest == transfer.sent_digest
    assert ovn_stack.fabric.underlay_bytes(node1) - before > 10_000_000

    # A security group without ingress rules drops; back to the default
    # group, traffic flows again.
    group = ovn_stack.admin("POST", "/v2.0/security-groups", {
        "security_group": {"name": f"drop-{tag}",
                           "project_id": ovn_stack.cloud.project_id}}
    ).expect(201)["security_group"]
    default_groups = port_b["security_groups"]
    try:
        ovn_stack.admin("PUT", f"/v2.0/ports/{port_b['id']}", {"port": {
            "security_groups": [group["id"]]}}).expect(200)
        wait_for(lambda: received(ping(pod_a, pod_b.address, count=2)) == 0,
                 20, "pings dropped by the group")
        ovn_stack.admin("PUT", f"/v2.0/ports/{port_b['id']}", {"port": {
            "security_groups": default_groups}}).expect(200)
        wait_for(lambda: received(ping(pod_a, pod_b.address, count=1)) == 1,
                 20, "pings through the default group again")
    finally:
        ovn_stack.admin("PUT", f"/v2.0/ports/{port_b['id']}", {"port": {
            "security_groups": default_groups}})
        ovn_stack.admin("DELETE", f"/v2.0/security-groups/{group['id']}")

    # Workers killed on node 1 (the Server and the Watcher) and node 2's
    # daemon restarted: nothing is lost (pods still plugged and talking,
    # new ADDs work, DEL too).
    daemon1 = cluster.daemons[node1.name]
    killed = daemon1.worker_pids()
    for name in ("server", "watcher"):
        os.kill(killed[name], signal.SIGKILL)
    port_c, pod_c = cluster.add(f"c-{tag}", node1)
    assert installed(pod_c)
    daemon2 = cluster.daemons[node2.name]
    daemon2.close()
    daemon2.start()
    daemon2.wait_ready(60)
    assert pod_b.ovs_port in node2.vsctl("list-ports", "br-int").split()
    assert ovn_stack.port(port_b["id"])["status"] == "ACTIVE"
    port_d, pod_d = cluster.add(f"d-{tag}", node2)
    assert installed(pod_d)
    for src, dst in ((pod_c, pod_b), (pod_c, pod_d), (pod_a, pod_d)):
        ovn_stack.fabric.wait_ping(src, dst)
    assert daemon1.status()["cniFailures"] == 0
    after = daemon1.worker_pids()
    assert after["server"] != killed["server"]
    assert after["watcher"] != killed["watcher"]

    # DEL: off br-int at once, and the port goes DOWN.
    for name, pod, port in ((f"b-{tag}", pod_b, port_b),
                            (f"c-{tag}", pod_c, port_c)):
        code, out = cluster.cni("DEL", name)
        assert code == 0, out
        assert pod.ovs_port not in pod.node.vsctl("list-ports",
                                                  "br-int").split()
        down = ovn_stack.wait_port(port["id"], "DOWN")
        assert down["binding:host_id"] == pod.node.name
    # Pod b is unplugged: nothing reaches it any more.
    assert received(ping(pod_a, pod_b.address, count=2)) == 0


def test_a_port_never_installed_names_what_is_missing(
        ovn_stack: OvnStack, cluster: Cluster) -> None:
    """ovn-controller stopped on node 1: ADD fails within the wait with
    code 11 naming it; nothing counted; nothing left on br-int. Started
    again, the same pod's ADD succeeds."""
    node1, _ = ovn_stack.fabric.nodes
    tag = uuid.uuid4().hex[:6]
    daemon = cluster.daemons[node1.name]
    daemon.options["cni_daemon"]["annotation_timeout"] = 6.0
    daemon.write_config()
    server = daemon.worker_pids()["server"]
    daemon.signal(signal.SIGHUP)
    # The Server worker applies it on its own signal: waited for, or the
    # ADD below may still wait the old 30 s.
    wait_for(lambda: f" {server} INFO oslo_config.cfg [-] Option cni_daemon."
             "annotation_timeout changed" in daemon.log(), 10,
             "the Server worker's reload")
    node1.controller.stop()
    try:
        name = f"x-{tag}"
        cluster.pods[name] = (cluster.api.add_pod("default", name, node1.name),
                              node1, cluster.new_netns())
        started = time.monotonic()
        code, out = cluster.cni("ADD", name)
        took = time.monotonic() - started
        assert code != 0 and out["code"] == 11, out
        assert "not installed by OVN" in out["msg"], out
        assert "ovn-controller is not running" in out["msg"], out
        assert took < 6.0 + 5.0, took
        assert daemon.status()["cniFailures"] == 0
        host = BridgeBinding.host_ifname(f"ctr-{name}", "eth0")
        assert host not in node1.vsctl("list-ports", "br-int").split()
    finally:
        node1.controller.start()
    code, out = cluster.cni("ADD", name)
    assert code == 0, (out, daemon.log())


POOL_DEVICE = "kuryr-supervisor-pool"


def test_a_pod_from_its_nodes_pool_gets_a_port_bound_there(
        ovn_stack: OvnStack, tmp_path: Path, namespaces: Namespaces) -> None:
    """Warm per-node pools ([vif_pool]): the pool of node 1 (started by
    its first pod) holds ports bound to node 1 (binding:host_id, vif_type
    ovs) before the next pod exists; that pod is served one of them,
    installed by node 1's ovn-controller when ADD returns, and keeps its
    host while the claim's update (device_id) lands."""
    node1, node2 = ovn_stack.fabric.nodes
    tag = uuid.uuid4().hex[:6]
    with ovn_stack.in_catalog():
        cluster = Cluster(ovn_stack, tmp_path, namespaces.create,
                          controller_options={"vif_pool": {
                              # min = max: the pool, once warm, is the
                              # two ports seen (no refill racing the pod).
                              "enabled": True, "ports_pool_min": 2,
                              "ports_pool_max": 2, "ports_pool_batch": 2,
                              "ports_pool_update_frequency": 0.5}}).start()
        try:
            _, first = cluster.add(f"first-{tag}", node1)
            pool: dict[str, dict[str, Any]] = {}

            def warm() -> bool:
                pool.clear()
                pool.update((p["id"], p) for p in ovn_stack.admin(
                    "GET", "/v2.0/ports", device_id=POOL_DEVICE,
                    network_id=ovn_stack.network_id).expect(200)["ports"]
                    if p["binding:host_id"] == node1.name
                    and p["binding:vif_type"] == "ovs")
                return len(pool) == 2
            # Warm: two free ports bound to node 1 in Neutron (a bulk
            # create binds its ports one by one after it commits them all)
            # and in the controller's pool, which has them only once the
            # create is answered.
            wait_for(lambda: warm() and cluster.pool_free().get(
                node1.name) == 2, 60, lambda: f"node 1's pool: Neutron "
                f"{sorted(pool)}, the controller's {cluster.pool_free()}")
            port, pod = cluster.add(f"pooled-{tag}", node1)
            assert port["id"] in pool, (port["id"], sorted(pool))
            assert installed(pod)
            claimed = ovn_stack.wait_port(port["id"], "ACTIVE", 10)
            assert claimed["binding:host_id"] == node1.name
            wait_for(lambda: ovn_stack.port(port["id"])["device_id"]
                     == cluster.api.pods[("default", f"pooled-{tag}")][
                         "metadata"]["uid"], 30, "the claim's update")
            assert ovn_stack.port(port["id"])["binding:host_id"] == \
                node1.name
            ovn_stack.fabric.wait_ping(pod, first)
        finally:
            cluster.close()
