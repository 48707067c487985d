"""A bound pod's port vanishes (an admin deletes it in Neutron): the
controller makes it again with the same address and MAC, bound to the
pod's node, and its PodPort names the new port; the node's daemon (OVS
binding, Kubernetes mode) follows its pods' PodPorts and points the pod's
interface at the new port (``iface-id``), which an OVN controller or OVS
agent binds by that id. Where it cannot (the interface has another MAC),
the pod gets a Warning Event ``PortLost`` and the node's network health
shows it (``/status``, the NodeNetwork record) until its PodPort goes.
Against the fakes and a private Open vSwitch: real daemons, the shim, a
real namespace."""
from __future__ import annotations

import contextlib
import dataclasses
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.cni.binding import BridgeBinding
from kuryr_supervisor.kubernetes import podport
from tests.fixtures.controller import Cloud, controller_daemon, subnet_cloud_fixture
from tests.fixtures.daemon import Daemon, wait_until
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


@dataclasses.dataclass
class Node:
    """The controller and the node's daemon running, the shim installed."""

    cloud: Cloud
    ovs: PrivateOVS
    cni: Daemon
    shim: str
    conf: dict[str, Any]
    namespaces: Namespaces

    def plug(self, name: str, container: str) -> Plugged:
        """A pod of this node, ADDed and bound: its port, its interface."""
        pod = self.cloud.api.add_pod("default", name, NODE)
        uid = pod["metadata"]["uid"]
        ns = self.namespaces.create()
        code, result = run_shim(self.shim, "ADD", self.conf,
                                container_id=container,
                                netns=f"/var/run/netns/{ns}",
                                args=pod_args(pod))
        assert code == 0, (result, self.cni.log())
        [port] = self.cloud.neutron.ports_for(uid)
        wait_until(lambda: (self.cloud.api.podports[("default", name)]
                            .get("status") or {}).get("boundAt"), 10)
        obj = self.cloud.api.podports[("default", name)]
        assert obj["metadata"]["labels"][podport.NODE_LABEL] == NODE
        host = BridgeBinding.host_ifname(container, "eth0")
        assert interface(self.ovs, host)["external_ids"]["iface-id"] == \
            port["id"]
        return Plugged(pod, uid, ns, container, result, host, port)

    def remake(self, plugged: Plugged) -> dict[str, Any]:
        """An admin deletes the pod's port; the controller makes it again
        and the PodPort names it: the new port."""
        old = plugged.port
        with self.cloud.neutron.lock:
            self.cloud.neutron._remove(old["id"])
        wait_until(lambda: self.cloud.neutron.ports_for(plugged.uid), 20)
        [new] = self.cloud.neutron.ports_for(plugged.uid)
        assert new["id"] != old["id"]
        assert new["fixed_ips"] == old["fixed_ips"]
        assert new["mac_address"] == old["mac_address"]
        assert new["binding:host_id"] == NODE
        name = plugged.pod["metadata"]["name"]
        wait_until(lambda: self.cloud.api.podports[("default", name)]["spec"]
                   ["portId"] == new["id"], 20)
        return new

    def shim_call(self, command: str, plugged: Plugged) -> tuple[int, Any]:
        conf = self.conf if command != "CHECK" else {
            **self.conf, "prevResult": plugged.result}
        return run_shim(self.shim, command, conf,
                        container_id=plugged.container,
                        netns=f"/var/run/netns/{plugged.ns}",
                        args=pod_args(plugged.pod))

    def events(self, plugged: Plugged) -> list[str]:
        """The reasons of the pod's Events (by UID or by name)."""
        meta = plugged.pod["metadata"]
        return [e["reason"] for e in self.cloud.api.core_events.values()
                if e["involvedObject"].get("uid") == plugged.uid or (
                    e["involvedObject"].get("kind") == "Pod" and
                    (e["involvedObject"].get("namespace"),
                     e["involvedObject"].get("name")) ==
                    (meta["namespace"], meta["name"]))]


@dataclasses.dataclass
class Plugged:
    pod: dict[str, Any]
    uid: str
    ns: str
    container: str
    result: Any
    host: str
    port: dict[str, Any]


@contextlib.contextmanager
def running(tmp_path: Path, cloud: Cloud, ovs: PrivateOVS,
            namespaces: Namespaces) -> Iterator[Node]:
    bridge = "ksvr" + secrets.token_hex(4)
    ovs.add_bridge(bridge)
    cloud.api.add_node(NODE)
    controller = controller_daemon(tmp_path / "controller", cloud)
    cni = cni_daemon(tmp_path / "cni", cloud, ovs, bridge)
    shim = install_shim(str(tmp_path))
    try:
        controller.start()
        cni.start()
        controller.wait_ready()
        cni.wait_ready()
        yield Node(cloud, ovs, cni, shim, netconf(cni), namespaces)
    finally:
        cni.close()
        controller.close()


def test_a_port_made_again_is_pointed_at_by_the_pods_interface(
        tmp_path: Path, cloud: Cloud, ovs: PrivateOVS,
        namespaces: Namespaces) -> None:
    with running(tmp_path, cloud, ovs, namespaces) as node:
        plugged = node.plug("moved", "ctr-m")
        new = node.remake(plugged)
        wait_until(lambda: interface(ovs, plugged.host)["external_ids"]
                   ["iface-id"] == new["id"], 20, 0.1)
        ids = interface(ovs, plugged.host)["external_ids"]
        assert ids["attached-mac"] == plugged.port["mac_address"]
        assert ids["vm-uuid"] == plugged.uid
        assert "points at it now" in node.cni.log()
        # CHECK agrees: the interface names the pod's port.
        code, out = node.shim_call("CHECK", plugged)
        assert code == 0, out
        assert "PortRecreated" in node.events(plugged)
        status = node.cni.status()
        assert status["cniFailures"] == 0
        assert status["network"]["lostPorts"] == {"count": 0, "pods": []}
        code, out = node.shim_call("DEL", plugged)
        assert code == 0, out


def _lost(doc: dict[str, Any]) -> dict[str, Any]:
    return doc.get("lostPorts") or {}


def test_an_interface_that_cannot_be_pointed_is_a_lost_port_the_node_shows(
        tmp_path: Path, cloud: Cloud, ovs: PrivateOVS,
        namespaces: Namespaces) -> None:
    with running(tmp_path, cloud, ovs, namespaces) as node:
        plugged = node.plug("stray", "ctr-s")
        other = "0e:00:5e:00:53:99"        # the interface has another MAC
        ovs.vsctl("set", "Interface", plugged.host,
                  f'external_ids:attached-mac="{other}"')
        new = node.remake(plugged)
        wait_until(lambda: _lost(node.cni.status()["network"]).get(
            "count") == 1, 20, 0.2)
        status = node.cni.status()
        [pod] = _lost(status["network"])["pods"]
        assert (pod["namespace"], pod["name"], pod["portId"]) == (
            "default", "stray", new["id"])
        assert other in pod["why"]
        assert interface(ovs, plugged.host)["external_ids"]["iface-id"] == \
            plugged.port["id"]                  # not pointed
        wait_until(lambda: "PortLost" in node.events(plugged), 10)
        # One pod's problem, not the node's: ready, STATUS succeeds.
        assert status["ready"] is True
        assert status["network"]["cniStatus"]["code"] == 0
        assert node.cni.probe("/ready") == 200
        wait_until(lambda: _lost(cloud.api.nodenetworks.get(NODE, {}).get(
            "status") or {}).get("count") == 1, 20, 0.2)
        record = cloud.api.nodenetworks[NODE]["status"]
        assert _lost(record)["pods"] == [pod]
        assert record["daemon"]["ready"] is True

        code, out = node.shim_call("DEL", plugged)   # the pod is deleted:
        assert code == 0, out
        cloud.api.delete_pod("default", "stray")     # its PodPort goes
        wait_until(lambda: ("default", "stray") not in cloud.api.podports,
                   20)
        wait_until(lambda: _lost(node.cni.status()["network"]) == {
            "count": 0, "pods": []}, 20, 0.2)
        wait_until(lambda: _lost(cloud.api.nodenetworks[NODE]["status"])
                   .get("count") == 0, 20, 0.2)
