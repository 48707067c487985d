"""The CNI data path end to end: shim subprocess -> Unix socket -> server ->
IPAM + bridge binding, in real namespaces, checked with the ``ip`` tool."""
from __future__ import annotations

import concurrent.futures
import ipaddress
import os
from collections.abc import Iterator
from typing import Any

import pytest

from kuryr_supervisor.cni.binding import BridgeBinding
from tests.functional.cni_harness import Daemon, Namespaces, ip, ip_json, running_daemon, unique

pytestmark = pytest.mark.privileged


@pytest.fixture
def daemon(tmp_path: Any) -> Iterator[Daemon]:
    with running_daemon(str(tmp_path)) as d:
        yield d


def path(name: str) -> str:
    return f"/var/run/netns/{name}"


def pod_iface(ns: str, ifname: str = "eth0") -> dict[str, Any] | None:
    for link in ip_json("-n", ns, "addr"):
        if link["ifname"] == ifname:
            return link
    return None


def bridge_ports(bridge: str) -> set[str]:
    return {p["ifname"] for p in ip_json("link", "show", "master", bridge)}


def add(daemon: Daemon, ns: str, cid: str, version: str = "1.1.0",
        **kw: Any) -> tuple[int, Any]:
    return daemon.shim("ADD", daemon.netconf(version), container_id=cid,
                       netns=path(ns), **kw)


def test_add_check_del_lifecycle(daemon: Daemon, namespaces: Namespaces) -> None:
    ns, cid = namespaces.create(), unique("c", 20)
    status, result = add(daemon, ns, cid, args="K8S_POD_NAMESPACE=default;"
                         "K8S_POD_NAME=web;K8S_POD_UID=u1")
    assert status == 0, result
    address = ipaddress.IPv4Interface(result["ips"][0]["address"])
    link = pod_iface(ns)
    assert link is not None and link["mtu"] == daemon.mtu
    assert "UP" in link["flags"]
    assert {(a["local"], a["prefixlen"]) for a in link["addr_info"]
            if a["family"] == "inet"} == {(str(address.ip), address.network.prefixlen)}
    (route,) = [r for r in ip_json("-n", ns, "route") if r["dst"] == "default"]
    assert route["gateway"] == result["ips"][0]["gateway"] == str(
        daemon.subnet.network_address + 1)
    host = BridgeBinding.host_ifname(cid, "eth0")
    assert host in bridge_ports(daemon.bridge)
    alloc = daemon.ipam.get(cid, "eth0")
    assert alloc is not None and alloc.pod.name == "web"

    status, out = daemon.shim("CHECK", {**daemon.netconf(), "prevResult": result},
                              container_id=cid, netns=path(ns))
    assert (status, out) == (0, None)

    assert daemon.shim("DEL", daemon.netconf(), container_id=cid,
                       netns=path(ns)) == (0, None)
    assert pod_iface(ns) is None
    assert host not in bridge_ports(daemon.bridge)
    assert ip("link", "show", host, check=False).returncode != 0
    assert daemon.ipam.list() == []
    # again: still success
    assert daemon.shim("DEL", daemon.netconf(), container_id=cid,
                       netns=path(ns)) == (0, None)
    assert daemon.state.cni_failures() == 0


def test_check_fails_when_interface_is_gone(daemon: Daemon,
                                            namespaces: Namespaces) -> None:
    ns, cid = namespaces.create(), unique("c", 20)
    _, result = add(daemon, ns, cid)
    ip("-n", ns, "link", "del", "eth0")
    status, err = daemon.shim("CHECK", {**daemon.netconf(), "prevResult": result},
                              container_id=cid, netns=path(ns))
    assert status == 1 and err["code"] == 104 and "eth0" in err["msg"]
    assert daemon.state.cni_failures() == 0     # CHECK never feeds the budget


def test_del_after_netns_deleted_frees_address(daemon: Daemon,
                                               namespaces: Namespaces) -> None:
    ns, cid = namespaces.create(), unique("c", 20)
    status, _ = add(daemon, ns, cid)
    assert status == 0
    ip("netns", "del", ns)
    assert daemon.shim("DEL", daemon.netconf(), container_id=cid,
                       netns=path(ns)) == (0, None)
    assert daemon.ipam.list() == []
    assert BridgeBinding.host_ifname(cid, "eth0") not in bridge_ports(daemon.bridge)
    # DEL without CNI_NETNS at all, for something never added
    assert daemon.shim("DEL", daemon.netconf(), container_id="never") == (0, None)


def test_second_add_replays_or_is_refused_and_changes_nothing(
        daemon: Daemon, namespaces: Namespaces) -> None:
    ns, cid = namespaces.create(), unique("c", 20)
    status, first = add(daemon, ns, cid)
    assert status == 0
    before = (daemon.ipam.list(), pod_iface(ns), bridge_ports(daemon.bridge))
    # the same request again (a retry): the recorded answer, nothing new
    assert add(daemon, ns, cid) == (0, first)
    # another netconf or another netns for the attachment: 102
    status, err = daemon.shim("ADD", daemon.netconf(extra={"dns": {}}),
                              container_id=cid, netns=path(ns))
    assert (status, err["code"]) == (1, 102)
    status, err = add(daemon, namespaces.create(), cid)
    assert (status, err["code"]) == (1, 102)
    after = (daemon.ipam.list(), pod_iface(ns), bridge_ports(daemon.bridge))
    assert after == before and daemon.state.cni_failures() == 0


@pytest.mark.parametrize("version", ["0.3.1", "0.4.0", "1.0.0", "1.1.0"])
def test_result_shape_per_version(daemon: Daemon, namespaces: Namespaces,
                                  version: str) -> None:
    ns, cid = namespaces.create(), unique("c", 20)
    status, res = add(daemon, ns, cid, version)
    assert status == 0 and res["cniVersion"] == version
    (ip_,) = res["ips"]
    assert ("version" in ip_) == version.startswith("0.")
    pod = res["interfaces"][ip_["interface"]]
    assert pod["name"] == "eth0" and pod["sandbox"] == path(ns)
    link = pod_iface(ns)
    assert link is not None and pod["mac"] == link["address"]
    assert ("mtu" in pod) == (version == "1.1.0")
    assert res["routes"] == [{"dst": "0.0.0.0/0", "gw": ip_["gateway"]}]
    assert res["dns"] == {"nameservers": ["10.96.0.10"]}
    if version != "0.3.1":
        assert daemon.shim("CHECK", {**daemon.netconf(version), "prevResult": res},
                           container_id=cid, netns=path(ns)) == (0, None)
    assert daemon.shim("DEL", daemon.netconf(version), container_id=cid,
                       netns=path(ns)) == (0, None)


def test_version_and_status(daemon: Daemon) -> None:
    status, body = daemon.shim("VERSION", {"cniVersion": "1.0.0"})
    assert status == 0 and body["supportedVersions"] == [
        "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
    assert daemon.shim("STATUS", daemon.netconf()) == (0, None)
    status, err = daemon.shim("STATUS", daemon.netconf("1.0.0"))
    assert (status, err["code"]) == (1, 1)


@pytest.mark.parametrize("key", ["cni.dev/valid-attachments", "cni.dev/attachments"])
def test_gc_releases_what_the_list_omits(daemon: Daemon, namespaces: Namespaces,
                                         key: str) -> None:
    pods = [(namespaces.create(), unique("c", 20)) for _ in range(4)]
    for ns, cid in pods:
        assert add(daemon, ns, cid)[0] == 0
    keep = pods[:2]
    # a leaked host veth on our bridge that no allocation owns
    leaked = BridgeBinding.host_ifname(unique("leak", 20), "eth0")
    ip("link", "add", leaked, "type", "veth", "peer", "name", unique("kst", 15))
    ip("link", "set", leaked, "master", daemon.bridge)
    valid = [{"containerID": cid, "ifname": "eth0"} for _, cid in keep]
    assert daemon.shim("GC", daemon.netconf(extra={key: valid})) == (0, None)
    assert {a.container_id for a in daemon.ipam.list()} == {c for _, c in keep}
    assert bridge_ports(daemon.bridge) == {
        BridgeBinding.host_ifname(cid, "eth0") for _, cid in keep}
    for ns, _ in pods[2:]:
        assert pod_iface(ns) is None
    for ns, _ in keep:
        assert pod_iface(ns) is not None


def test_fifty_parallel_adds_then_dels(daemon: Daemon, namespaces: Namespaces) -> None:
    pods = [(namespaces.create(), unique("c", 20)) for _ in range(50)]
    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        results = list(pool.map(lambda p: add(daemon, *p), pods))
    assert all(status == 0 for status, _ in results), results
    addresses = {r["ips"][0]["address"] for _, r in results}
    assert len(addresses) == 50
    for (ns, _), (_, res) in zip(pods, results, strict=True):
        link = pod_iface(ns)
        assert link is not None and any(
            f"{a['local']}/{a['prefixlen']}" == res["ips"][0]["address"]
            for a in link["addr_info"])
    assert len(bridge_ports(daemon.bridge)) == 50

    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        dels = list(pool.map(lambda p: daemon.shim(
            "DEL", daemon.netconf(), container_id=p[1], netns=path(p[0])), pods))
    assert all(d == (0, None) for d in dels), dels
    assert daemon.ipam.list() == [] and bridge_ports(daemon.bridge) == set()
    assert all(pod_iface(ns) is None for ns, _ in pods)
    assert os.listdir(os.path.join(daemon.tmp, "state", "locks")) == []
    assert daemon.state.cni_failures() == 0
    assert daemon.state.server_load() == (0, 64)
