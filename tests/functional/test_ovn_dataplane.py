"""Pods on two nodes over the real OVN data plane, plugged by hand.

The stack (tests/fixtures/ovn/): OVN central and two simulated nodes, each a
netns with its own Open vSwitch (userspace datapath) and ovn-controller,
joined by a Geneve underlay; a Neutron of the real cloud with the ML2/OVN
driver. Pods are plugged as an L2 agent or os-vif would (a veth on
``br-int`` with ``iface-id``, ``attached-mac``, ``iface-status=active``):
these tests prove the stack itself, which the CNI's own OVS binding is then
tested on.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.fixtures.ovn.fabric import Pod, ping, received, tcp_transfer
from tests.fixtures.ovn.node import Node
from tests.fixtures.ovn.stack import OvnStack, wait_for

pytestmark = [pytest.mark.privileged, pytest.mark.realcloud]

#: A pod maker: (node, **port attributes) -> (port, pod).
MakePod = Callable[..., tuple[dict[str, Any], Pod]]


@pytest.fixture
def make_pod(ovn_stack: OvnStack) -> Iterator[MakePod]:
    """Ports bound to a node and pods plugged for them; all removed after
    the test (pods unplugged, namespaces and ports deleted)."""
    made: list[tuple[dict[str, Any], Pod]] = []

    def make(node: Node, **extra: Any) -> tuple[dict[str, Any], Pod]:
        name = f"ovn-test-{uuid.uuid4().hex[:8]}"
        port = ovn_stack.create_port(name, node.name, **extra)
        [fixed] = port["fixed_ips"]
        prefix = ovn_stack.cidr.split("/")[1]
        pod = ovn_stack.fabric.plug(
            node, port["id"], port["mac_address"],
            f"{fixed['ip_address']}/{prefix}", ovn_stack.mtu,
            gateway=ovn_stack.gateway)
        made.append((port, pod))
        return port, pod

    yield make
    for port, pod in made:
        ovn_stack.fabric.remove(pod)
        ovn_stack.admin("DELETE", f"/v2.0/ports/{port['id']}").expect(204, 404)


def test_plugged_port_turns_active_bound_to_its_node(
        ovn_stack: OvnStack, make_pod: MakePod) -> None:
    node1, node2 = ovn_stack.fabric.nodes
    port, _ = make_pod(node2)
    assert port["binding:host_id"] == node2.name
    port = ovn_stack.wait_port(port["id"], "ACTIVE")
    assert port["binding:vif_type"] == "ovs"
    assert port["binding:host_id"] == node2.name
    # OVN agrees: the port is claimed by node 2's chassis, not node 1's.
    chassis = ovn_stack.fabric.central.sbctl(
        "--bare", "--columns=chassis", "find", "port_binding",
        f"logical_port={port['id']}").strip()
    name = ovn_stack.fabric.central.sbctl(
        "--bare", "--columns=name", "list", "chassis", chassis).strip()
    assert name == node2.name != node1.name


def test_pods_on_two_nodes_talk_through_geneve(
        ovn_stack: OvnStack, make_pod: MakePod) -> None:
    node1, node2 = ovn_stack.fabric.nodes
    port_a, pod_a = make_pod(node1)
    port_b, pod_b = make_pod(node2)
    for port in (port_a, port_b):
        ovn_stack.wait_port(port["id"], "ACTIVE")
    before = ovn_stack.fabric.underlay_bytes(node1)
    ovn_stack.fabric.wait_ping(pod_a, pod_b)
    # What a failed ping would print: the packet's path through OVS (out
    # the Geneve tunnel), the pinned underlay, ovn-controller, the bindings.
    told = ovn_stack.fabric.explain(pod_a, pod_b)
    for words in ("Datapath actions:", "tnl_push", node2.encap_ip,
                  "connected", f"Port_Binding of {port_b['id']}"):
        assert words in told, told
    done = ping(pod_a, pod_b.address, count=5)
    assert received(done) == 5, done.stdout
    transfer = tcp_transfer(pod_a, pod_b, 20_000_000)
    assert transfer.received == transfer.sent == 20_000_000
    assert transfer.received_digest == transfer.sent_digest
    # All of it left node 1 through its underlay, in Geneve.
    assert ovn_stack.fabric.underlay_bytes(node1) - before > 20_000_000


def test_security_group_that_drops_does_drop(
        ovn_stack: OvnStack, make_pod: MakePod) -> None:
    node1, node2 = ovn_stack.fabric.nodes
    group = ovn_stack.admin("POST", "/v2.0/security-groups", {
        "security_group": {"name": f"ovn-test-{uuid.uuid4().hex[:8]}",
                           "project_id": ovn_stack.cloud.project_id}}
    ).expect(201)["security_group"]
    try:
        _, client = make_pod(node1)
        guarded_port, guarded = make_pod(node2,
                                         security_groups=[group["id"]])
        open_port, reachable = make_pod(node2)
        for port in (guarded_port, open_port):
            ovn_stack.wait_port(port["id"], "ACTIVE")
        # The same client reaches a pod of the default group on that node...
        ovn_stack.fabric.wait_ping(client, reachable)
        # ...but not the pod whose group has no ingress rule.
        assert received(ping(client, guarded.address, count=3)) == 0
        # Allowing ICMP opens it: the group, not the path, dropped it.
        ovn_stack.admin("POST", "/v2.0/security-group-rules", {
            "security_group_rule": {"security_group_id": group["id"],
                                    "direction": "ingress",
                                    "ethertype": "IPv4",
                                    "protocol": "icmp"}}).expect(201)
        wait_for(lambda: received(ping(client, guarded.address,
                                       count=1)) == 1,
                 20, f"a ping to {guarded.address} once ICMP is allowed")
    finally:
        # Neutron keeps a group while a port is in it: its ports go first
        # (make_pod's teardown then finds them gone).
        for port in ovn_stack.admin("GET", "/v2.0/ports",
                                    security_groups=group["id"]
                                    ).expect(200)["ports"]:
            ovn_stack.admin("DELETE", f"/v2.0/ports/{port['id']}")
        ovn_stack.admin("DELETE",
                        f"/v2.0/security-groups/{group['id']}").expect(204)


def test_unplugged_port_turns_down(ovn_stack: OvnStack,
                                   make_pod: MakePod) -> None:
    node1, _ = ovn_stack.fabric.nodes
    port, pod = make_pod(node1)
    ovn_stack.wait_port(port["id"], "ACTIVE")
    ovn_stack.fabric.unplug(pod)
    assert pod.ovs_port not in node1.vsctl("list-ports", "br-int").split()
    port = ovn_stack.wait_port(port["id"], "DOWN")
    assert port["binding:host_id"] == node1.name


def test_a_failed_ping_across_nodes_says_why(
        ovn_stack: OvnStack, make_pod: MakePod) -> None:
    """Node 1's pinned tunnel neighbour for node 2 replaced by a MAC that
    is nobody's: the ping times out, and the account it prints says why
    (OVS's trace: the Geneve packet pushed towards that MAC; node 1's
    tunnel neighbours: node 2's encap address at that MAC, not at node 2's
    br-phy). Pinned again, the same ping goes through."""
    node1, node2 = ovn_stack.fabric.nodes
    port_a, pod_a = make_pod(node1)
    port_b, pod_b = make_pod(node2)
    for port in (port_a, port_b):
        ovn_stack.wait_port(port["id"], "ACTIVE")
    ovn_stack.fabric.wait_ping(pod_a, pod_b)
    nobody = "02:00:00:5e:00:99"
    try:
        node1.appctl("tnl/neigh/set", "br-phy", node2.encap_ip, nobody)
        with pytest.raises(AssertionError) as failed:
            ovn_stack.fabric.wait_ping(pod_a, pod_b, timeout=3)
        told = str(failed.value)
        assert "timed out after 3 s: a ping from" in told
        trace, rest = told.split("ofproto/trace on", 1)[1].split(
            f"tnl/neigh/show on {node1.name}:", 1)
        pushed = [line for line in trace.splitlines()
                  if "Datapath actions:" in line and "tnl_push" in line]
        assert pushed, trace
        assert f"eth(dst={nobody}" in pushed[-1] \
            and f"dst={node2.encap_ip}" in pushed[-1], pushed
        neighbours = rest.split("ovs/route/show", 1)[0]
        assert any(node2.encap_ip in line and nobody in line
                   for line in neighbours.splitlines()), neighbours
    finally:
        ovn_stack.fabric.pin_underlay()
    ovn_stack.fabric.wait_ping(pod_a, pod_b)
