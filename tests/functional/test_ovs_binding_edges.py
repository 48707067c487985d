"""The OVS binding's edges, against a private Open vSwitch in Kubernetes
mode: a port that never becomes ACTIVE (or fails to bind), OVS options
refused before any worker starts (exit 78, one line), and libcni's cnitool
driving ADD, CHECK and DEL through the shipped conflist."""
from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

import pytest

from kuryr_supervisor.cni.binding import BridgeBinding
from tests.fixtures.controller import Cloud, controller_daemon, subnet_cloud_fixture
from tests.fixtures.daemon import run_once, wait_until
from tests.fixtures.ovs import PrivateOVS
from tests.functional.cni_harness import Namespaces, install_shim, ip_json, run_shim
from tests.functional.ovs_harness import (
    NODE,
    cni_daemon,
    interface,
    netconf,
    ovs_fixture,
    pod_args,
)
from tests.functional.test_cnitool import Cnitool, copy_shipped

pytestmark = pytest.mark.privileged


cloud = pytest.fixture(subnet_cloud_fixture)
ovs = pytest.fixture(ovs_fixture)


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


def test_cnitool_add_check_del_del(tmp_path: Path, cloud: Cloud, ovs: PrivateOVS,
                                   namespaces: Namespaces, cnitool: Path) -> None:
    """A real runtime library (libcni's cnitool, the shipped conflist and
    the Python shim as installed): ADD puts the pod's port on the bridge,
    CHECK from libcni's cached result passes and then fails once the port
    is removed behind our back, DEL and a repeated DEL answer 0 and leave
    nothing on the bridge."""
    bridge = "ksvi" + secrets.token_hex(4)
    ovs.add_bridge(bridge)
    cloud.api.add_node(NODE)
    controller = controller_daemon(tmp_path / "controller", cloud,
                                   {"controller": {"port_status_interval": 0.3}})
    cni = cni_daemon(tmp_path / "cni", cloud, ovs, bridge)
    root = tmp_path / "host"
    copy_shipped(f"unix://{cni.socket_path}", root, "python", None)
    tool = Cnitool(cnitool, root)
    pod = cloud.api.add_pod("default", "ovs-tool", NODE)
    ns = namespaces.create()
    netns = f"/var/run/netns/{ns}"

    def run(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(cnitool), command, "kuryr", netns],
                              env={**tool.env(), "CNI_ARGS": pod_args(pod)},
                              capture_output=True, text=True, timeout=120,
                              check=False)
    host = ""
    try:
        controller.start()
        cni.start()
        controller.wait_ready()
        cni.wait_ready()
        done = run("add")
        assert done.returncode == 0, (done.stderr, cni.log())
        [port] = cloud.neutron.ports_for(pod["metadata"]["uid"])
        [host] = ovs.vsctl("list-ports", bridge).split()
        assert interface(ovs, host)["external_ids"]["iface-id"] == port["id"]
        done = run("check")
        assert done.returncode == 0, done.stderr
        ovs.vsctl("del-port", bridge, host)
        done = run("check")
        assert done.returncode != 0 and "not a port of" in done.stderr, done.stderr
        for _ in range(2):
            done = run("del")
            assert done.returncode == 0, done.stderr
        assert ovs.vsctl("list-ports", bridge).split() == []
        assert not ip_json("link", "show", host)
        assert cni.status()["cniFailures"] == 0
    finally:
        cni.close()
        controller.close()
        if host:                                    # a veth a failure left
            subprocess.run(["ip", "link", "del", host], capture_output=True,
                           check=False)
