"""The OVS binding (``[binding] driver = ovs``) against a private Open
vSwitch (userspace datapath), in Kubernetes mode: the controller role makes
each pod's port in the fake Neutron and writes its PodPort; the CNI role
adds the pod's veth to the integration bridge with the port's identity.

Proves: two pods' ports on the bridge with the external_ids an OVN
controller or OVS agent reads and the MTU; the pods ping each other and
move a TCP stream through the bridge (transmit checksum offload off on a
netdev datapath); CHECK finds a port removed behind our back; GC removes a
stale port of ours and leaves a foreign one; DEL removes the port (a second
DEL without a netns answers 0); a hung ovsdb-server gives ADD a clear code
11, never counted, and fails readiness ``ovsdb``.
"""
from __future__ import annotations

import hashlib
import json
import random
import secrets
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.cni import netlink
from kuryr_supervisor.cni.binding import BridgeBinding
from tests.fixtures.controller import Cloud, controller_daemon, start_cloud
from tests.fixtures.daemon import Daemon, run_once, wait_until
from tests.fixtures.ovs import PrivateOVS
from tests.functional.cni_harness import Namespaces, install_shim, ip_json, run_shim

pytestmark = pytest.mark.privileged

NODE = "node-ovs"
MTU = 1400


@pytest.fixture
def cloud() -> Iterator[Cloud]:
    net = f"10.{random.randrange(150, 199)}.{random.randrange(256)}"
    cloud = start_cloud(cidr=f"{net}.0/24", gateway=f"{net}.1")
    yield cloud
    cloud.stop()


@pytest.fixture
def ovs() -> Iterator[PrivateOVS]:
    switch = PrivateOVS().start()
    yield switch
    switch.close()


def cni_daemon(workdir: Path, cloud: Cloud, ovs: PrivateOVS,
               bridge: str) -> Daemon:
    workdir.mkdir(parents=True, exist_ok=True)
    return Daemon(workdir, {
        "kubernetes": {"api_root": cloud.api.url, "node_name": NODE,
                       "request_timeout": 1.0, "watch_timeout": 5,
                       "api_check_interval": 0.2, "api_check_timeout": 0.5,
                       "reclaim_interval": 0.5},
        "cni_daemon": {"address_source": "podport",
                       "annotation_timeout": 3.0},
        "ipam": {"subnet": cloud.neutron.subnet["cidr"],
                 "gateway": cloud.neutron.subnet["gateway_ip"]},
        "binding": {"driver": "ovs", "ovs_bridge": bridge, "mtu": MTU,
                    "ovsdb_connection": ovs.connection,
                    "ovsdb_timeout": 2.0},
    })


def pod_args(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return (f"K8S_POD_NAMESPACE={meta['namespace']};K8S_POD_NAME={meta['name']};"
            f"K8S_POD_UID={meta['uid']}")


def netconf(d: Daemon) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "kuryr", "type": "kuryr-cni",
            "daemon_socket": f"unix://{d.socket_path}"}


def in_netns(ns: str, script: str, timeout: float = 30
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, "python3", "-c",
                           textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=timeout, check=False)


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


def interface(ovs: PrivateOVS, name: str) -> dict[str, Any]:
    out = json.loads(ovs.vsctl("--format=json", "--columns=external_ids,mtu_request",
                               "find", "Interface", f"name={name}"))
    [row] = out["data"]
    return {"external_ids": dict(row[0][1]), "mtu_request": row[1]}


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
        wait_until(lambda: host_c not in ovs.vsctl("list-ports", bridge).split(), 15)
        assert not ip_json("link", "show", host_c)
        assert cni.status()["cniFailures"] == 0
    finally:
        cni.close()
        controller.close()
        for name in "abc":
            subprocess.run(["ip", "link", "del",
                            BridgeBinding.host_ifname(f"ctr-{name}", "eth0")],
                           capture_output=True, check=False)


@pytest.mark.parametrize("bind", ["DOWN", "FAILED"])
def test_a_port_that_is_not_active(tmp_path: Path, cloud: Cloud,
                                   ovs: PrivateOVS, namespaces: Namespaces,
                                   bind: str) -> None:
    """ADD waits for ACTIVE after plumbing (on by default with ovs): a port
    that stays DOWN gets code 11 naming it once annotation_timeout is up,
    one that failed to bind at once; neither is counted, nothing is left
    on the bridge or the host."""
    bridge = "ksvi" + secrets.token_hex(4)
    ovs.add_bridge(bridge)
    cloud.neutron.faults.bind = bind
    cloud.api.add_node(NODE)
    controller = controller_daemon(tmp_path / "controller", cloud,
                                   {"controller": {"port_status_interval": 0.3}})
    cni = cni_daemon(tmp_path / "cni", cloud, ovs, bridge)
    shim = install_shim(str(tmp_path))
    try:
        controller.start()
        cni.start()
        controller.wait_ready()
        cni.wait_ready()
        pod = cloud.api.add_pod("default", "ovs-down", NODE)
        wait_until(lambda: cloud.podport("default", "ovs-down") is not None, 10)
        ns = namespaces.create()
        code, out = run_shim(shim, "ADD", netconf(cni), container_id="ctr-d",
                             netns=f"/var/run/netns/{ns}", args=pod_args(pod))
        [port] = cloud.neutron.ports_for(pod["metadata"]["uid"])
        assert code != 0 and out["code"] == 11, out
        if bind == "DOWN":
            assert f"port {port['id']}" in out["msg"]
            assert "is not ACTIVE" in out["msg"], out
        else:
            assert "failed to bind" in out["msg"], out
        host = BridgeBinding.host_ifname("ctr-d", "eth0")
        assert host not in ovs.vsctl("list-ports", bridge).split()
        assert not ip_json("link", "show", host)
        assert not ip_json("-n", ns, "link", "show", "eth0")
        assert cni.status()["cniFailures"] == 0
    finally:
        cni.close()
        controller.close()
        subprocess.run(["ip", "link", "del",
                        BridgeBinding.host_ifname("ctr-d", "eth0")],
                       capture_output=True, check=False)


@pytest.mark.parametrize("binding,named", [
    ({"ovs_bridge": "br int"}, "[binding] ovs_bridge"),
    ({"ovsdb_connection": "unix:run/db.sock"}, "[binding] ovsdb_connection"),
])
def test_bad_ovs_options_exit_78(tmp_path: Path, binding: dict[str, str],
                                 named: str) -> None:
    status, stderr, _ = run_once(tmp_path / "d", {
        "kubernetes": {"api_root": "http://127.0.0.1:1", "node_name": NODE},
        "cni_daemon": {"address_source": "podport"},
        "binding": {"driver": "ovs", **binding}}, timeout=20)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert status == 78 and len(lines) == 1 and named in lines[0], stderr
