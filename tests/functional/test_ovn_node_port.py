"""The node reaches its pods and its pods reach the node, on the real OVN
stack (the session's ``ovn_stack``: two simulated nodes, the ML2/OVN
Neutron): the controller with the port and canary handlers (which make
the node ports and the nodes' security group), our daemon on each node
with the OVS binding and the shipped [node_port] defaults.

* each node's port is plugged as an OVS internal port in the node's own
  namespace, installed by OVN, with the port's MAC and address;
* from node 1's namespace (where a kubelet runs its probes) an HTTP GET
  answers from a pod on node 1 and from a pod on node 2, as the kubelet's
  HTTP probe asks; a pod on node 1 reaches a server on its node's port
  address;
* the port deleted from the bridge behind the daemon's back is plugged
  again and the GET answers again;
* the controller stopped gracefully (``release_on_stop``) leaves no node
  port nor nodes' security group in Neutron; the test removes what it
  plugged on the bridges;
* with the services handler on, node 1 reaches a Service whose
  endpoint is a pod on node 2 through its VIP (Octavia's OVN provider,
  the ``services`` handler), as a kubelet or a host-network pod would.

Timings go to stderr (``[node-port]``): daemons ready to the first answer
from node 1; the port deleted to the next answer; a Service made to its
first answer through its VIP from node 1.
"""
from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.controller.openstack.wire import NODE_OWNER
from tests.fixtures.ovn.cni import Cluster, cluster_tag
from tests.fixtures.ovn.fabric import Pod
from tests.fixtures.ovn.lb import OvnOctavia
from tests.fixtures.ovn.node import Node
from tests.fixtures.ovn.stack import OvnStack, wait_for
from tests.functional.cni_harness import Namespaces

pytestmark = [pytest.mark.privileged, pytest.mark.realcloud]

IFNAME = "kuryr-node0"          # [node_port] ifname's default
HANDLERS = "neutron_port,network_canary"

#: An HTTP server answering every GET with 200 and its name.
_SERVER = """
import http.server, sys
name = sys.argv[1].encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(name)))
        self.end_headers()
        self.wfile.write(name)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer((sys.argv[2], int(sys.argv[3])), H)
print("listening", flush=True)
s.serve_forever()
"""

#: One HTTP GET as the kubelet's probe makes it (1 s timeout): the body,
#: or the error.
_GET = """
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=1.0) as r:
        print(r.status, r.read().decode())
except Exception as exc:
    print("error", exc)
"""


def log(msg: str) -> None:
    print(f"[node-port] {msg}", file=sys.stderr, flush=True)


def in_netns(netns: str, *argv: str) -> str:
    done = subprocess.run(["ip", "netns", "exec", netns, *argv],
                          capture_output=True, text=True, timeout=30)
    return (done.stdout + done.stderr).strip()


def get(netns: str, address: str, port: int = 8080) -> str:
    return in_netns(netns, "/usr/bin/python3", "-c", _GET,
                    f"http://{address}:{port}/healthz")


def serve(netns: str, name: str, address: str = "0.0.0.0",
          port: int = 8080) -> subprocess.Popen[str]:
    server = subprocess.Popen(
        ["ip", "netns", "exec", netns, "/usr/bin/python3", "-c", _SERVER,
         name, address, str(port)], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)
    assert server.stdout is not None
    assert server.stdout.readline().strip() == "listening"
    return server


def node_address(node: Node) -> str:
    """The node port's address in the node's namespace ("" none yet)."""
    out = in_netns(node.netns, "ip", "-4", "-o", "addr", "show", "dev",
                   IFNAME)
    parts = out.split()
    return parts[3].split("/")[0] if "inet" in parts else ""


def installed(node: Node) -> bool:
    return node.vsctl("--if-exists", "get", "Interface", IFNAME,
                      "external_ids:ovn-installed") == '"true"'


ARP_IGNORE = "net.ipv4.conf.all.arp_ignore"


@pytest.fixture
def nodes_restored(ovn_stack: OvnStack) -> Iterator[None]:
    """After the test, the node ports taken off the bridges (their routes
    go with them) and the sysctl the daemons raised (the userspace
    datapath) put back."""
    before = {n.name: in_netns(n.netns, "sysctl", "-n", ARP_IGNORE)
              for n in ovn_stack.fabric.nodes}
    yield
    for node in ovn_stack.fabric.nodes:
        node.vsctl("--if-exists", "del-port", "br-int", IFNAME)
        in_netns(node.netns, "sysctl", "-qw",
                 f"{ARP_IGNORE}={before[node.name]}")


@pytest.fixture
def cluster(ovn_stack: OvnStack, tmp_path: Path, namespaces: Namespaces,
            nodes_restored: None) -> Iterator[Cluster]:
    with ovn_stack.in_catalog():
        made = Cluster(
            ovn_stack, tmp_path, namespaces.create,
            cni_options={"network_health": {"record_min_interval": 0.5}},
            controller_options={
                "controller": {"handlers": HANDLERS},
                "network_health": {"canary_resync_interval": 2.0,
                                   "release_on_stop": True}})
        try:
            yield made.start()
        finally:
            made.close()


def test_the_node_reaches_its_pods_and_they_reach_it(
        ovn_stack: OvnStack, cluster: Cluster) -> None:
    node1, node2 = ovn_stack.fabric.nodes
    started = time.monotonic()
    tag = uuid.uuid4().hex[:6]
    _, pod1 = cluster.add(f"web1-{tag}", node1)
    _, pod2 = cluster.add(f"web2-{tag}", node2)
    servers = [serve(pod1.netns, "pod1"), serve(pod2.netns, "pod2")]
    try:
        for node in (node1, node2):
            wait_for(lambda node=node: bool(node_address(node)) and
                     installed(node), 60, lambda node=node:
                     f"{node.name}'s node port: "
                     f"{in_netns(node.netns, 'ip', 'addr')}\n"
                     f"{cluster.daemons[node.name].log()}")
        ours = cluster_tag(cluster.api)
        ports = [p for p in ovn_stack.admin(
            "GET", "/v2.0/ports", device_owner=NODE_OWNER).expect(
                200)["ports"] if ours in p["tags"]]
        assert sorted(p["binding:host_id"] for p in ports) == sorted(
            n.name for n in ovn_stack.fabric.nodes)
        by_node = {p["binding:host_id"]: p for p in ports}
        for node in (node1, node2):
            # The userspace datapath: the pods' host ends answer no ARP.
            assert in_netns(node.netns, "sysctl", "-n", ARP_IGNORE) == "1"
            port = by_node[node.name]
            assert node_address(node) == port["fixed_ips"][0]["ip_address"]
            assert port["mac_address"] in in_netns(
                node.netns, "ip", "link", "show", IFNAME)
            assert node.vsctl("get", "Interface", IFNAME, "type") == \
                "internal"
            ovn_stack.wait_port(port["id"], "ACTIVE", 30)
        check_reach(ovn_stack, node1, pod1, pod2, started)

        # The port deleted from the bridge: plugged again.
        gone = time.monotonic()
        node1.vsctl("del-port", "br-int", IFNAME)
        wait_for(lambda: get(node1.netns, pod2.address) == "200 pod2", 30,
                 lambda: f"node 1 to pod 2 again: "
                         f"{get(node1.netns, pod2.address)}\n"
                         f"{cluster.daemons[node1.name].log()}")
        log(f"port deleted -> node 1 reaches pod 2 again in "
            f"{time.monotonic() - gone:.2f} s")
        for daemon in cluster.daemons.values():
            text = daemon.log()
            assert " ERROR " not in text and "Traceback" not in text, text
    finally:
        for server in servers:
            server.kill()
            server.wait()
    # The pods deleted (their ports off the bridges, then in Neutron), the
    # daemons stopped (the node ports stay plugged), then the controller
    # (release_on_stop: every node port and the nodes' group deleted).
    uids = []
    for name in (f"web1-{tag}", f"web2-{tag}"):
        uids.append(cluster.pods[name][0]["metadata"]["uid"])
        code, out = cluster.cni("DEL", name)
        assert code == 0, out
        cluster.api.delete_pod("default", name)
    for daemon in cluster.daemons.values():
        daemon.close()
    assert installed(node1)
    assert cluster.controller is not None
    wait_for(lambda: not ovn_stack.admin(
        "GET", "/v2.0/ports", device_id=uids).expect(200)["ports"], 30,
        "the pods' ports deleted")
    cluster.controller.close()
    # This cluster's: other tests' clusters share the stack's Neutron.
    ours = cluster_tag(cluster.api)
    left = ovn_stack.admin("GET", "/v2.0/ports",
                           device_owner=NODE_OWNER).expect(200)["ports"]
    assert [p for p in left if ours in p["tags"]] == []
    groups = ovn_stack.admin("GET", "/v2.0/security-groups").expect(
        200)["security_groups"]
    assert [g for g in groups if g["name"] == f"{ours}:nodes"] == []


def diagnose(stack: OvnStack, node: Node, pod: Pod, address: str) -> str:
    """What the node, the pod and Neutron say when the pod cannot reach
    its node's port."""
    rules = stack.admin("GET", "/v2.0/security-group-rules").expect(
        200)["security_group_rules"]
    ports = stack.admin("GET", "/v2.0/ports", device_owner=NODE_OWNER
                        ).expect(200)["ports"]
    named = [(r["security_group_id"], r["direction"], r["remote_group_id"])
             for r in rules if r["remote_group_id"]]
    return "; ".join([
        f"rules naming a group {named}",
        f"node ports' groups {[p['security_groups'] for p in ports]}",
        f"pod's neighbours {in_netns(pod.netns, 'ip', 'neigh')}",
        f"node's sockets {in_netns(node.netns, 'ss', '-ltn')}",
        f"node's link {in_netns(node.netns, 'ip', 'link', 'show', IFNAME)}",
        f"to {address}: {get(pod.netns, address, 9099)}"])


def check_reach(stack: OvnStack, node1: Node, pod1: Pod, pod2: Pod,
                started: float) -> None:
    """From node 1 an HTTP GET answers from both pods; pod 1 reaches a
    server on node 1's port address."""
    for pod, name in ((pod1, "pod1"), (pod2, "pod2")):
        wait_for(lambda pod=pod, name=name: get(node1.netns, pod.address)
                 == f"200 {name}", 60,
                 lambda pod=pod: f"node 1 to {pod.address}: "
                                 f"{get(node1.netns, pod.address)}")
    log(f"pods added -> node 1 answered by both pods in "
        f"{time.monotonic() - started:.2f} s")
    address = node_address(node1)
    server = serve(node1.netns, "node1", address, 9099)
    try:
        wait_for(lambda: get(pod1.netns, address, 9099) == "200 node1", 30,
                 lambda: diagnose(stack, node1, pod1, address))
    finally:
        server.kill()
        server.wait()


def test_the_node_reaches_a_service_vip(
        ovn_stack: OvnStack, ovn_octavia: OvnOctavia, tmp_path: Path,
        namespaces: Namespaces, nodes_restored: None) -> None:
    """The node reaches a Service through its VIP: the controller, which
    runs the ``services`` handler, names its service subnet's range in the
    node's spec, the node (``[node_port]`` at its defaults) routes it
    through the node port via the pod subnet's gateway, and the Service's
    OVN load balancer (the ``services`` handler's, Octavia's OVN
    provider) applies on the pod switch. On the Octavia fixture's pod
    network and service subnet."""
    octavia = ovn_octavia
    with ovn_stack.in_catalog():
        made = Cluster(
            ovn_stack, tmp_path, namespaces.create,
            cni_options={"network_health": {"record_min_interval": 0.5}},
            controller_options={
                "controller": {"handlers": f"{HANDLERS},services",
                               "pod_network_id": octavia.pod_network_id,
                               "pod_subnet_id": octavia.pod_subnet_id},
                "services": {"service_subnet_id": octavia.service_subnet_id,
                             "resync_interval": 10.0, "settle_timeout": 30.0},
                "network_health": {"canary_resync_interval": 2.0,
                                   "release_on_stop": True}})
        node1, node2 = ovn_stack.fabric.nodes
        server = None
        try:
            made.start()
            tag = uuid.uuid4().hex[:6]
            _, pod2 = made.add(f"web-{tag}", node2)
            server = serve(pod2.netns, "web")
            made.api.add_service("default", f"web-{tag}", VIP, ports=[
                {"name": "http", "protocol": "TCP", "port": 80,
                 "targetPort": "http"}], selector={"app": "web"})
            made.api.put_endpointslice("default", f"web-{tag}-x1",
                                       f"web-{tag}", addresses=[pod2.address],
                                       ports={"http": 8080})
            since = time.monotonic()
            wait_for(lambda: get(node1.netns, VIP, 80) == "200 web", 120,
                     lambda: f"node 1 to {VIP}: {get(node1.netns, VIP, 80)}; "
                     f"routes {in_netns(node1.netns, 'ip', 'route')}")
            log(f"Service made -> node 1 answered through its VIP in "
                f"{time.monotonic() - since:.2f} s")
            gateway = octavia.pod_gateway
            assert f"{octavia.service_cidr} via {gateway} dev {IFNAME}" in \
                in_netns(node1.netns, "ip", "route")
            made.api.delete_service("default", f"web-{tag}")
            wait_for(lambda: not lb_left(made), 60, "the Service's load "
                     "balancer deleted")
        finally:
            if server is not None:
                server.kill()
                server.wait()
            for daemon in made.daemons.values():
                daemon.close()
            made.close()
            sweep_lbs(made)


#: The web Service's clusterIP, on the Octavia fixture's service subnet.
VIP = "10.43.0.201"


def lb_api(made: Cluster) -> Any:
    """Octavia's calls as the controller's user."""
    from oslo_config import cfg

    from kuryr_supervisor import conf as conf_mod
    from kuryr_supervisor.controller.openstack import adapter as osa
    path = made.tmp / "lb.conf"
    path.write_text("[neutron]\n" + "".join(
        f"{k} = {v}\n" for k, v in made.stack.cloud.conf_overrides().items()))
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf(["--config-file", str(path)], default_config_files=[])
    return osa.OpenStack.from_conf(conf).octavia()


def lb_left(made: Cluster) -> list[Any]:
    """The web Service's load balancer, while there is one."""
    tag = f"kuryr-supervisor:{made.api.namespaces['kube-system']}"
    return list(lb_api(made).load_balancers(tags=[tag], vip_address=VIP))


def sweep_lbs(made: Cluster) -> None:
    """This cluster's load balancers (the canary Service's, a failed
    test's) deleted: the session's Octavia is shared."""
    lbs = lb_api(made)
    tag = f"kuryr-supervisor:{made.api.namespaces['kube-system']}"
    deadline = time.monotonic() + 60
    while (left := list(lbs.load_balancers(tags=[tag]))) and \
            time.monotonic() < deadline:
        for lb in left:
            if lb.status in ("ACTIVE", "ERROR"):
                with contextlib.suppress(Exception):
                    lbs.delete_load_balancer(lb.id)
        time.sleep(0.5)
