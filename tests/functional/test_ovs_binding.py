"""The OVS binding (``[binding] driver = ovs``) against a private Open
vSwitch (userspace datapath), in Kubernetes mode: the controller role makes
each pod's port in the fake Neutron and writes its PodPort; the CNI role
adds the pod's veth to the integration bridge with the port's identity.

Proves: two pods' ports on the bridge with the external_ids an OVN
controller or OVS agent reads and the MTU; the pods ping each other and
move a TCP stream through the bridge (transmit checksum offload off on a
netdev datapath); CHECK finds a port removed behind our back or naming
another port; GC removes a stale port of ours and leaves a foreign one; DEL
removes the port (a second DEL without a netns answers 0); a hung
ovsdb-server gives ADD a clear code 11, never counted, and fails readiness
``ovsdb``; the Watcher's reclaim removes a deleted pod's port. The edges
(a port never ACTIVE, options refused at start, libcni's cnitool) are in
``test_ovs_binding_edges.py``.
"""
from __future__ import annotations

import hashlib
import random
import secrets
import subprocess
import textwrap
from pathlib import Path

import pytest

from kuryr_supervisor.cni import netlink
from kuryr_supervisor.cni.binding import BridgeBinding
from tests.fixtures.controller import Cloud, controller_daemon, subnet_cloud_fixture
from tests.fixtures.daemon import wait_until
from tests.fixtures.ovs import PrivateOVS
from tests.functional.cni_harness import Namespaces, install_shim, ip_json, run_shim
from tests.functional.ovs_harness import (
    MTU,
    NODE,
    cni_daemon,
    in_netns,
    interface,
    netconf,
    ovs_fixture,
    pod_args,
)

pytestmark = pytest.mark.privileged


cloud = pytest.fixture(subnet_cloud_fixture)
ovs = pytest.fixture(ovs_fixture)


PING = """
import os, socket, struct, sys, time
def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
sock.settimeout(2)
ok = 0
for seq in range(3):
    body = struct.pack("!BBHHH", 8, 0, 0, 4242, seq) + b"kuryr-ovs-ping!!"
    body = body[:2] + struct.pack("!H", csum(body)) + body[4:]
    sock.sendto(body, ("{dst}", 0))
    end = time.monotonic() + 2
    while time.monotonic() < end:
        try:
            data, src = sock.recvfrom(2048)
        except socket.timeout:
            break
        ihl = (data[0] & 15) * 4
        if src[0] == "{dst}" and data[ihl] == 0 and data[ihl + 6:ihl + 8] == struct.pack("!H", seq):
            ok += 1
            break
print(ok)
"""

SERVER = """
import hashlib, socket
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("{addr}", {port})); srv.listen(1); srv.settimeout(20)
conn, _ = srv.accept(); conn.settimeout(20)
h = hashlib.sha256(); n = 0
while True:
    data = conn.recv(65536)
    if not data:
        break
    h.update(data); n += len(data)
print(n, h.hexdigest())
"""

CLIENT = """
import socket, time
payload = bytes.fromhex("{seed}") * (1 << 16)
for _ in range(50):
    try:
        c = socket.create_connection(("{addr}", {port}), timeout=5)
        break
    except OSError:
        time.sleep(0.1)
c.sendall(payload); c.close()
"""



def test_pods_on_the_integration_bridge(tmp_path: Path, cloud: Cloud,
                                        ovs: PrivateOVS,
                                        namespaces: Namespaces) -> None:
    bridge = "ksvi" + secrets.token_hex(4)
    ovs.add_bridge(bridge)
    cloud.api.add_node(NODE)
    controller = controller_daemon(tmp_path / "controller", cloud,
                                   {"controller": {"port_status_interval": 0.3}})
    cni = cni_daemon(tmp_path / "cni", cloud, ovs, bridge)
    shim = install_shim(str(tmp_path))
    conf = netconf(cni)
    try:
        controller.start()
        cni.start()
        controller.wait_ready()
        cni.wait_ready()
        assert cni.probe("/ready/ovsdb") == 200

        pods, results, nss = [], [], []
        for name in ("a", "b"):
            pod = cloud.api.add_pod("default", f"ovs-{name}", NODE)
            ns = namespaces.create()
            code, result = run_shim(shim, "ADD", conf, container_id=f"ctr-{name}",
                                    netns=f"/var/run/netns/{ns}", args=pod_args(pod))
            assert code == 0, (result, cni.log())
            pods.append(pod)
            results.append(result)
            nss.append(ns)

        ports = set(ovs.vsctl("list-ports", bridge).split())
        for name, pod, ns in zip("ab", pods, nss, strict=True):
            host = BridgeBinding.host_ifname(f"ctr-{name}", "eth0")
            assert host in ports
            [port] = cloud.neutron.ports_for(pod["metadata"]["uid"])
            iface = interface(ovs, host)
            assert iface["external_ids"] == {
                "iface-id": port["id"], "attached-mac": port["mac_address"],
                "iface-status": "active", "vm-uuid": pod["metadata"]["uid"],
                "kuryr-supervisor": "cni"}
            assert iface["mtu_request"] == MTU
            [link] = ip_json("-n", ns, "link", "show", "eth0")
            assert link["address"] == port["mac_address"]
            assert link["mtu"] == MTU
            with netlink.open_netns(f"/var/run/netns/{ns}") as fd:
                assert netlink.tx_checksum("eth0", fd) is False

        addr_a, addr_b = (r["ips"][0]["address"].split("/")[0] for r in results)
        # ICMP through the bridge, both ways
        for ns, dst in ((nss[0], addr_b), (nss[1], addr_a)):
            done = in_netns(ns, PING.replace("{dst}", dst))
            assert done.stdout.strip() == "3", done

        # A TCP stream through the bridge (checksums done by the pods)
        port_no = random.randrange(20000, 60000)
        seed = secrets.token_hex(16)
        server = subprocess.Popen(
            ["ip", "netns", "exec", nss[1], "python3", "-c",
             textwrap.dedent(SERVER).replace("{addr}", addr_b).replace(
                 "{port}", str(port_no))],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            client = in_netns(nss[0], CLIENT.replace("{addr}", addr_b).replace(
                "{port}", str(port_no)).replace("{seed}", seed))
            out, err = server.communicate(timeout=30)
        finally:
            server.kill()
        assert client.returncode == 0, client
        payload = bytes.fromhex(seed) * (1 << 16)
        assert out.split() == [str(len(payload)),
                               hashlib.sha256(payload).hexdigest()], err

        # CHECK passes, then fails once the port is removed behind our back
        host_a = BridgeBinding.host_ifname("ctr-a", "eth0")
        check_conf = {**conf, "prevResult": results[0]}
        code, out = run_shim(shim, "CHECK", check_conf, container_id="ctr-a",
                             netns=f"/var/run/netns/{nss[0]}", args=pod_args(pods[0]))
        assert code == 0, out
        ovs.vsctl("del-port", bridge, host_a)
        code, out = run_shim(shim, "CHECK", check_conf, container_id="ctr-a",
                             netns=f"/var/run/netns/{nss[0]}", args=pod_args(pods[0]))
        assert code != 0 and f"not a port of {bridge}" in out["msg"], out

        # GC: a stale port of ours goes, a foreign one (no mark) stays
        stale, foreign = ("ksv" + secrets.token_hex(6) for _ in range(2))
        ovs.vsctl("add-port", bridge, stale, "--", "set", "Interface", stale,
                  "external_ids:kuryr-supervisor=cni", "external_ids:iface-id=x")
        ovs.vsctl("add-port", bridge, foreign, "--", "set", "Interface", foreign,
                  "external_ids:iface-id=y")
        valid = [{"containerID": f"ctr-{n}", "ifname": "eth0"} for n in "ab"]
        code, out = run_shim(shim, "GC", {**conf, "cniVersion": "1.1.0",
                                          "cni.dev/valid-attachments": valid})
        assert code == 0, out
        ports = set(ovs.vsctl("list-ports", bridge).split())
        assert stale not in ports and foreign in ports
        assert BridgeBinding.host_ifname("ctr-b", "eth0") in ports

        # CHECK compares the iface-id with the pod's port (its PodPort)
        host_b = BridgeBinding.host_ifname("ctr-b", "eth0")
        ovs.vsctl("set", "Interface", host_b, "external_ids:iface-id=other")
        code, out = run_shim(shim, "CHECK", {**conf, "prevResult": results[1]},
                             container_id="ctr-b",
                             netns=f"/var/run/netns/{nss[1]}", args=pod_args(pods[1]))
        assert code != 0 and "iface-id other is not the pod's port" in out["msg"], out

        # DEL: the port and the veth go; a second DEL without netns is fine
        code, out = run_shim(shim, "DEL", conf, container_id="ctr-b",
                             netns=f"/var/run/netns/{nss[1]}", args=pod_args(pods[1]))
        assert code == 0, out
        assert host_b not in ovs.vsctl("list-ports", bridge).split()
        assert not ip_json("link", "show", host_b)
        code, out = run_shim(shim, "DEL", conf, container_id="ctr-b",
                             netns="", args=pod_args(pods[1]))
        assert code == 0, out

        # A hung ovsdb-server: ADD gets code 11 naming OVSDB, not counted;
        # readiness ovsdb fails; all well again once it answers.
        pod_c = cloud.api.add_pod("default", "ovs-c", NODE)
        ns_c = namespaces.create()
        wait_until(lambda: cloud.podport("default", "ovs-c") is not None, 10)
        ovs.stop_db()
        try:
            code, out = run_shim(shim, "ADD", conf, container_id="ctr-c",
                                 netns=f"/var/run/netns/{ns_c}", args=pod_args(pod_c))
            assert code != 0 and out["code"] == 11 and "OVSDB" in out["msg"], out
            assert cni.status()["cniFailures"] == 0
            host_c = BridgeBinding.host_ifname("ctr-c", "eth0")
            assert not ip_json("link", "show", host_c)      # rolled back
            wait_until(lambda: cni.probe("/ready/ovsdb") not in (0, 200), 20)
            assert "OVSDB" in cni.get("/ready/ovsdb")[1]
        finally:
            ovs.continue_db()
        wait_until(lambda: cni.probe("/ready/ovsdb") == 200, 20)
        code, out = run_shim(shim, "ADD", conf, container_id="ctr-c",
                             netns=f"/var/run/netns/{ns_c}", args=pod_args(pod_c))
        assert code == 0, out
        assert host_c in ovs.vsctl("list-ports", bridge).split()

        # The pod deleted in the API: the Watcher's reclaim removes its port
        cloud.api.delete_pod("default", "ovs-c")
        # (the port leaves the bridge first, then the veth goes)
        wait_until(lambda: host_c not in ovs.vsctl("list-ports", bridge).split()
                   and not ip_json("link", "show", host_c), 15)
        assert cni.status()["cniFailures"] == 0
    finally:
        cni.close()
        controller.close()
        for name in "abc":
            subprocess.run(["ip", "link", "del",
                            BridgeBinding.host_ifname(f"ctr-{name}", "eth0")],
                           capture_output=True, check=False)
