"""Octavia's OVN provider on the real OVN stack: a load balancer that
carries traffic between pods (the fixture the Service handler is tested on).

Two member pods on node 1, each running a tiny TCP server that answers a
connection with its own name, and a client pod on node 2, all on the
fixture's pod network; the VIP on its service network, both on one
router. Built as Kuryr builds a Service (load balancer, TCP listener,
pool with ``SOURCE_IP_PORT``, a member per endpoint, each once the load
balancer is ACTIVE again), then: both members answer through the VIP; a
member deleted gets no more connections while it still answers directly;
a cascade delete leaves no Octavia object, no VIP port in Neutron and no
Load_Balancer row in OVN's NB database, and no error line in Octavia's
logs. Traffic is judged by connections to the VIP with short connect
timeouts (0.2 s), never by the load balancer's status: ACTIVE is not
traffic. The timings go to stderr (``[octavia]``).
"""
from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.fixtures.ovn.fabric import Pod
from tests.fixtures.ovn.lb import OvnOctavia, log
from tests.fixtures.ovn.node import Node
from tests.fixtures.ovn.stack import OvnStack, wait_for

pytestmark = [pytest.mark.privileged, pytest.mark.realcloud]

LISTENER_PORT = 80
MEMBER_PORT = 8080

#: A TCP server answering each connection with its name, then closing.
_SERVER = """
import socket, sys
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", int(sys.argv[1])))
srv.listen(64)
print("listening", flush=True)
while True:
    conn, _ = srv.accept()
    with conn:
        conn.sendall(sys.argv[2].encode() + b"\\n")
"""

#: Connections to HOST:PORT, each from a new source port, until COUNT
#: answered or SECONDS passed; prints every attempt's answer ("" for none).
_PROBE = """
import json, socket, sys, time
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
end = time.monotonic() + float(sys.argv[4])
answers = []
while sum(1 for a in answers if a) < count and time.monotonic() < end:
    try:
        with socket.create_connection((host, port), timeout=0.2) as c:
            c.settimeout(1.0)
            answers.append(c.recv(64).decode().strip())
    except OSError:
        answers.append("")
        time.sleep(0.05)
print(json.dumps(answers))
"""

#: A pod maker: (node, name) -> pod; with a name, it runs the TCP server.
MakePod = Callable[..., Pod]


def probe(client: Pod, host: str, port: int, count: int,
          seconds: float) -> list[str]:
    """What connections from ``client`` to ``host:port`` got until
    ``count`` answered or ``seconds`` passed, failed attempts as ""."""
    done = client.run("/usr/bin/python3", "-c", _PROBE, host, str(port),
                      str(count), str(seconds), timeout=seconds + 10,
                      check=True)
    return list(json.loads(done.stdout))


@pytest.fixture
def make_pod(ovn_stack: OvnStack, ovn_octavia: OvnOctavia
             ) -> Iterator[MakePod]:
    """Pods on the fixture's pod network, each plugged and ACTIVE; with a
    name, running the TCP server that answers with it. All removed after."""
    made: list[tuple[str, Pod, subprocess.Popen[str] | None]] = []

    def make(node: Node, name: str = "") -> Pod:
        port = ovn_stack.create_port(f"lb-test-{uuid.uuid4().hex[:8]}",
                                     node.name,
                                     network_id=ovn_octavia.pod_network_id)
        [fixed] = port["fixed_ips"]
        pod = ovn_stack.fabric.plug(
            node, port["id"], port["mac_address"],
            f"{fixed['ip_address']}/24", ovn_octavia.pod_mtu,
            gateway=ovn_octavia.pod_gateway)
        server = None
        if name:
            server = subprocess.Popen(
                ["ip", "netns", "exec", pod.netns, "/usr/bin/python3", "-c",
                 _SERVER, str(MEMBER_PORT), name],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        made.append((port["id"], pod, server))
        if server is not None:
            assert server.stdout is not None
            assert server.stdout.readline().strip() == "listening"
        ovn_stack.wait_port(port["id"], "ACTIVE")
        return pod

    yield make
    for port_id, pod, server in made:
        if server is not None:
            server.kill()
            server.wait()
        ovn_stack.fabric.remove(pod)
        ovn_stack.admin("DELETE", f"/v2.0/ports/{port_id}").expect(204, 404)


@pytest.fixture
def loadbalancers(ovn_octavia: OvnOctavia) -> Iterator[list[str]]:
    """Ids of the load balancers a test made: cascade-deleted after it,
    even when it failed half-way."""
    made: list[str] = []
    yield made
    for lb_id in made:
        ovn_octavia.call("DELETE", f"/v2/lbaas/loadbalancers/{lb_id}",
                         cascade="true")


def test_load_balancer_carries_traffic_to_pods(
        ovn_stack: OvnStack, ovn_octavia: OvnOctavia, make_pod: MakePod,
        loadbalancers: list[str]) -> None:
    since = ovn_octavia.mark()     # this test's own lines of the logs
    node1, node2 = ovn_stack.fabric.nodes
    member_a, member_b = make_pod(node1, "a"), make_pod(node1, "b")
    client = make_pod(node2)
    # The path without the load balancer works: a member answers directly.
    assert probe(client, member_b.address, MEMBER_PORT, 1, 20)[-1] == "b"

    started = time.monotonic()
    lb = ovn_octavia.create("/v2/lbaas/loadbalancers", "loadbalancer", {
        "name": f"lb-test-{uuid.uuid4().hex[:8]}",
        "vip_subnet_id": ovn_octavia.service_subnet_id, "provider": "ovn"},
        "")
    loadbalancers.append(lb["id"])
    lb_active = time.monotonic() - started
    vip = lb["vip_address"]
    assert vip.startswith("10.43.")
    vip_port = f"ovn-lb-vip-{lb['id']}"
    assert len(ovn_stack.admin("GET", "/v2.0/ports", name=vip_port)
               .expect(200)["ports"]) == 1
    listener = ovn_octavia.create("/v2/lbaas/listeners", "listener", {
        "loadbalancer_id": lb["id"], "protocol": "TCP",
        "protocol_port": LISTENER_PORT}, lb["id"])
    pool = ovn_octavia.create("/v2/lbaas/pools", "pool", {
        "listener_id": listener["id"], "protocol": "TCP",
        "lb_algorithm": "SOURCE_IP_PORT"}, lb["id"])
    members: dict[str, dict[str, Any]] = {}
    for name, pod in (("a", member_a), ("b", member_b)):
        members[name] = ovn_octavia.create(
            f"/v2/lbaas/pools/{pool['id']}/members", "member", {
                "address": pod.address, "protocol_port": MEMBER_PORT,
                "subnet_id": ovn_octavia.pod_subnet_id}, lb["id"])
    built = time.monotonic() - started
    assert lb["id"] in ovn_octavia.ovn_load_balancers()

    def context() -> str:
        return (ovn_stack.fabric.central.nbctl("list", "Load_Balancer")
                + ovn_octavia.explain())

    # Both members get connections through the VIP, from another node.
    wait_for(lambda: any(probe(client, vip, LISTENER_PORT, 1, 2)), 30,
             lambda: f"an answer from {vip}:{LISTENER_PORT}\n{context()}",
             interval=0)
    first_answer = time.monotonic() - started
    answers = probe(client, vip, LISTENER_PORT, 40, 30)
    assert set(answers) - {""} == {"a", "b"}, (answers, context())
    log(f"load balancer ACTIVE {lb_active:.1f} s after its POST; listener, "
        f"pool and two members ACTIVE at {built:.1f} s; the VIP answered "
        f"{first_answer - built:.2f} s later; of {len(answers)} connections "
        f"{answers.count('a')} went to a, {answers.count('b')} to b, "
        f"{answers.count('')} failed")

    # A deleted member gets no more connections; the other gets them all.
    ovn_octavia.call("DELETE", f"/v2/lbaas/pools/{pool['id']}/members/"
                     f"{members['b']['id']}").expect(204)
    deleted = time.monotonic()
    wait_for(lambda: set(probe(client, vip, LISTENER_PORT, 20, 10))
             == {"a"}, 30,
             lambda: f"only member a behind {vip}\n{context()}", interval=0)
    log(f"member b out of the traffic {time.monotonic() - deleted:.2f} s "
        f"after its DELETE")
    # Member b itself still answers: the load balancer left it out.
    assert probe(client, member_b.address, MEMBER_PORT, 1, 5)[-1] == "b"
    ovn_octavia.wait_active(lb["id"])

    # Cascade delete: nothing left in Octavia, Neutron or OVN's NB.
    ovn_octavia.call("DELETE", f"/v2/lbaas/loadbalancers/{lb['id']}",
                     cascade="true").expect(204)
    wait_for(lambda: ovn_octavia.call(
        "GET", f"/v2/lbaas/loadbalancers/{lb['id']}").status == 404
        or ovn_octavia.loadbalancer(lb["id"])["provisioning_status"]
        == "DELETED", 30, f"load balancer {lb['id']} deleted")
    wait_for(lambda: not ovn_octavia.ovn_load_balancers(), 30,
             lambda: f"no Load_Balancer in NB\n{context()}")
    assert ovn_stack.admin("GET", "/v2.0/ports", name=vip_port
                           ).expect(200)["ports"] == []
    assert not any(probe(client, vip, LISTENER_PORT, 1, 1))
    assert ovn_octavia.errors(since) == []
