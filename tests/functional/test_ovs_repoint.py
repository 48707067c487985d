"""A bound pod's port vanishes (an admin deletes it in Neutron): the
controller makes it again with the same address and MAC, bound to the
pod's node, and its PodPort names the new port; the node's daemon (OVS
binding, Kubernetes mode) follows its pods' PodPorts and points the pod's
interface at the new port (``iface-id``), which an OVN controller or OVS
agent binds by that id. Against the fakes and a private Open vSwitch:
real daemons, the shim, a real namespace."""
from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from kuryr_supervisor.cni.binding import BridgeBinding
from kuryr_supervisor.kubernetes import podport
from tests.fixtures.controller import Cloud, controller_daemon, subnet_cloud_fixture
from tests.fixtures.daemon import wait_until
from tests.fixtures.ovs import PrivateOVS
from tests.functional.cni_harness import Namespaces, install_shim, run_shim
from tests.functional.ovs_harness import (
    NODE,
    cni_daemon,
    interface,
    netconf,
    ovs_fixture,
    pod_args,
)

pytestmark = pytest.mark.privileged

cloud = pytest.fixture(subnet_cloud_fixture)
ovs = pytest.fixture(ovs_fixture)


def test_a_port_made_again_is_pointed_at_by_the_pods_interface(
        tmp_path: Path, cloud: Cloud, ovs: PrivateOVS,
        namespaces: Namespaces) -> None:
    bridge = "ksvr" + secrets.token_hex(4)
    ovs.add_bridge(bridge)
    cloud.api.add_node(NODE)
    controller = controller_daemon(tmp_path / "controller", cloud)
    cni = cni_daemon(tmp_path / "cni", cloud, ovs, bridge)
    shim = install_shim(str(tmp_path))
    conf = netconf(cni)
    try:
        controller.start()
        cni.start()
        controller.wait_ready()
        cni.wait_ready()
        pod = cloud.api.add_pod("default", "moved", NODE)
        uid = pod["metadata"]["uid"]
        ns = namespaces.create()
        code, result = run_shim(shim, "ADD", conf, container_id="ctr-m",
                                netns=f"/var/run/netns/{ns}",
                                args=pod_args(pod))
        assert code == 0, (result, cni.log())
        host = BridgeBinding.host_ifname("ctr-m", "eth0")
        [old] = cloud.neutron.ports_for(uid)
        wait_until(lambda: (cloud.api.podports[("default", "moved")]
                            .get("status") or {}).get("boundAt"), 10)
        obj = cloud.api.podports[("default", "moved")]
        assert obj["metadata"]["labels"][podport.NODE_LABEL] == NODE
        assert interface(ovs, host)["external_ids"]["iface-id"] == old["id"]

        with cloud.neutron.lock:                    # an admin deletes it
            cloud.neutron._remove(old["id"])
        wait_until(lambda: cloud.neutron.ports_for(uid), 20)
        [new] = cloud.neutron.ports_for(uid)
        assert new["id"] != old["id"]
        assert new["fixed_ips"] == old["fixed_ips"]
        assert new["mac_address"] == old["mac_address"]
        assert new["binding:host_id"] == NODE
        wait_until(lambda: cloud.api.podports[("default", "moved")]["spec"]
                   ["portId"] == new["id"], 20)
        wait_until(lambda: interface(ovs, host)["external_ids"]["iface-id"]
                   == new["id"], 20, 0.1)
        ids = interface(ovs, host)["external_ids"]
        assert ids["attached-mac"] == old["mac_address"]
        assert ids["vm-uuid"] == uid
        assert "points at it now" in cni.log()
        # CHECK agrees: the interface names the pod's port.
        code, out = run_shim(shim, "CHECK", {**conf, "prevResult": result},
                             container_id="ctr-m",
                             netns=f"/var/run/netns/{ns}", args=pod_args(pod))
        assert code == 0, out
        events = [e["reason"] for e in cloud.api.core_events.values()
                  if e["involvedObject"]["uid"] == uid]
        assert "PortRecreated" in events, events
        assert cni.status()["cniFailures"] == 0
        code, out = run_shim(shim, "DEL", conf, container_id="ctr-m",
                             netns=f"/var/run/netns/{ns}", args=pod_args(pod))
        assert code == 0, out
    finally:
        cni.close()
        controller.close()
