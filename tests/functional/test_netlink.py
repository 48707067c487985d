"""The netlink adapter against real namespaces, checked with ``ip``."""
from __future__ import annotations

import concurrent.futures
import errno
import ipaddress
import pathlib
import subprocess
import time

import pytest

from kuryr_supervisor.cni import netlink as nl
from tests.fixtures.netns import (
    Netns,
    NetnsFactory,
    ip,
    ip_json,
    link_names,
    unique,
)

pytestmark = pytest.mark.privileged

GW = ipaddress.IPv4Interface("10.97.0.1/24")


def test_probe() -> None:
    nl.probe()


def test_open_missing_netns_is_netns_not_found(tmp_path: pathlib.Path) -> None:
    with pytest.raises(nl.NetnsNotFound) as info:
        with nl.open_netns("/var/run/netns/ksvt-missing"):
            pass
    assert info.value.errno == errno.ENOENT
    with pytest.raises(nl.NetnsNotFound) as info:
        with nl.open_netns("/proc/999999999/ns/net"):
            pass
    assert info.value.errno == errno.ENOENT
    stale = tmp_path / "stale"  # a bind-mount target whose mount is gone
    stale.write_text("")
    with pytest.raises(nl.NetnsNotFound) as info:
        with nl.open_netns(str(stale)):
            pass
    assert info.value.errno == errno.EINVAL


def test_handle_in_netns_by_name_and_by_proc_path(netns: Netns) -> None:  # noqa: F811
    ip("link", "add", "ksvtx", "type", "bridge", netns=netns.name)
    with nl.open_netns(netns.path) as fd, nl.handle(fd) as h:
        assert {link.name for link in nl.list_links(h)} == {"lo", "ksvtx"}
    proc = subprocess.Popen(["ip", "netns", "exec", netns.name,
                             "sleep", "30"])
    try:
        time.sleep(0.2)
        with nl.open_netns(f"/proc/{proc.pid}/ns/net") as fd:
            with nl.handle(fd) as h:
                assert nl.link_index(h, "ksvtx") is not None
    finally:
        proc.kill()
        proc.wait()
    # The host namespace is untouched by a namespaced handle.
    assert "ksvtx" not in link_names()


def test_errors_keep_errno(netns_factory: NetnsFactory) -> None:  # noqa: F811
    name = unique("ksvtv")
    netns_factory.track_link(name)
    with nl.handle() as h:
        with pytest.raises(nl.NetlinkError) as info:
            nl.set_link(h, "ksvt-nothere", up=True)
        assert info.value.errno == errno.ENODEV
        nl.create_veth(h, name, unique("ksvtp"), mtu=1500)
        with pytest.raises(nl.NetlinkError) as info:
            nl.create_veth(h, name, unique("ksvtp"), mtu=1500)
        assert info.value.errno == errno.EEXIST
        with pytest.raises(nl.NetlinkError) as info:
            nl.set_link(h, name, mtu=10)
        assert info.value.errno == errno.EINVAL
        assert nl.delete_link(h, name) is True
        assert nl.delete_link(h, name) is False


def test_ensure_bridge_is_idempotent_and_concurrent(test_bridge: str) -> None:  # noqa: F811
    def ensure() -> int:
        with nl.rtnl() as r:
            return nl.ensure_bridge(r, test_bridge, GW)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        indexes = set(pool.map(lambda _: ensure(), range(16)))
    assert len(indexes) == 1
    (br,) = ip_json("-d", "addr", "show", test_bridge)
    assert br["linkinfo"]["info_kind"] == "bridge" and "UP" in br["flags"]
    assert [(a["local"], a["prefixlen"]) for a in br["addr_info"]
            if a["family"] == "inet"] == [("10.97.0.1", 24)]
    with open(f"/sys/class/net/{test_bridge}/addr_assign_type") as f:
        assert f.read().strip() == "3"  # NET_ADDR_SET: MAC pinned


def test_ensure_bridge_refuses_a_non_bridge(
        netns_factory: NetnsFactory) -> None:  # noqa: F811
    name = unique("ksvtv")
    netns_factory.track_link(name)
    ip("link", "add", name, "type", "veth", "peer", "name", unique("ksvtp"))
    with nl.rtnl() as r, pytest.raises(nl.NetlinkError, match="not a bridge"):
        nl.ensure_bridge(r, name, GW)
    assert nl.link_kind(name) == "veth"
    assert nl.link_kind(unique("ksvtz")) is None


def test_veth_into_netns_address_route_and_read_back(
        netns: Netns, netns_factory: NetnsFactory) -> None:  # noqa: F811
    host, temp = unique("ksvtv"), unique("ksvtp")
    netns_factory.track_link(host)
    with nl.open_netns(netns.path) as fd:
        with nl.handle() as h:
            nl.create_veth(h, host, temp, mtu=1450, peer_netns=fd)
            host_link = nl.get_link(h, host)
        with nl.handle(fd) as ns:
            nl.set_link(ns, temp, new_name="eth0")
            nl.set_link(ns, "eth0", up=True)
            nl.add_address(ns, "eth0", ipaddress.IPv4Interface("10.97.0.7/24"))
            nl.add_address(ns, "eth0", ipaddress.IPv4Interface("10.97.0.7/24"),
                           exist_ok=True)
            nl.add_default_route(ns, "eth0", GW.ip)
            pod = nl.get_link(ns, "eth0")
            pod_routes = nl.routes(ns)
    assert host_link.kind == "veth" and host_link.mtu == 1450
    assert pod.mtu == 1450 and pod.up and pod.kind == "veth"
    assert pod.addresses == (ipaddress.IPv4Interface("10.97.0.7/24"),)
    assert nl.Route(None, GW.ip, pod.index) in pod_routes
    (default,) = ip_json("route", "show", "default", netns=netns.name)
    assert default["gateway"] == "10.97.0.1"
    assert temp not in link_names() and temp not in link_names(netns.name)


def test_ensure_bridge_moves_the_gateway_when_the_subnet_changes(
        test_bridge: str) -> None:  # noqa: F811
    new_gw = ipaddress.IPv4Interface("10.98.0.1/25")
    with nl.rtnl() as r:
        first = nl.ensure_bridge(r, test_bridge, GW)
        ip("link", "set", test_bridge, "down")
        assert nl.ensure_bridge(r, test_bridge, new_gw) == first
    (br,) = ip_json("addr", "show", test_bridge)
    assert [(a["local"], a["prefixlen"]) for a in br["addr_info"]
            if a["family"] == "inet"] == [("10.98.0.1", 25)]
    assert "UP" in br["flags"]


def test_raw_read_link_agrees_with_ip(
        netns: Netns, netns_factory: NetnsFactory, test_bridge: str) -> None:  # noqa: F811
    host = unique("ksvtv")
    netns_factory.track_link(host)
    with nl.open_netns(netns.path) as fd, nl.rtnl() as r:
        bridge = nl.ensure_bridge(r, test_bridge, GW)
        nl.new_veth(r, host, "eth0", mtu=1400, host_mac=nl.random_mac(),
                    peer_mac=nl.random_mac(), peer_netns=fd, master=bridge)
        veth = nl.read_link(r, host)
        br = nl.read_link(r, test_bridge)
        assert nl.read_link(r, unique("ksvtz")) is None
    assert veth is not None and br is not None
    (shown,) = ip_json("-d", "link", "show", host)
    assert (veth.name, veth.index, veth.kind, veth.mac, veth.mtu, veth.master,
            veth.up) == (host, shown["ifindex"], "veth", shown["address"],
                         1400, bridge, "UP" in shown["flags"])
    assert br.kind == "bridge" and br.index == bridge
    assert br.addresses == (GW,)


def test_move_link_into_netns(
        netns: Netns, netns_factory: NetnsFactory) -> None:  # noqa: F811
    host, peer = unique("ksvtv"), unique("ksvtp")
    netns_factory.track_link(host)
    with nl.open_netns(netns.path) as fd, nl.handle() as h:
        nl.create_veth(h, host, peer, mtu=1500)
        nl.move_link(h, peer, fd)
    assert peer in link_names(netns.name) and peer not in link_names()


def test_list_links_by_prefix(netns_factory: NetnsFactory) -> None:  # noqa: F811
    prefix = unique("ksvtl", 10)
    names = [prefix + str(i) for i in range(3)]
    for name in names:
        netns_factory.track_link(name)
        ip("link", "add", name, "type", "bridge")
    with nl.handle() as h:
        found = nl.list_links(h, prefix)
    assert sorted(link.name for link in found) == names
    assert {link.kind for link in found} == {"bridge"}


def test_raw_veth_pod_setup_and_removal(
        netns: Netns, netns_factory: NetnsFactory, test_bridge: str) -> None:  # noqa: F811
    host = unique("ksvtv")
    netns_factory.track_link(host)
    with nl.rtnl() as r:
        bridge = nl.ensure_bridge(r, test_bridge, GW)
    host_mac, pod_mac = nl.random_mac(), nl.random_mac()
    assert int(host_mac[:2], 16) & 0x3 == 0x2    # unicast, local
    with nl.open_netns(netns.path) as fd:
        with nl.rtnl() as r:
            nl.new_veth(r, host, "eth0", mtu=1450, host_mac=host_mac,
                        peer_mac=pod_mac, peer_netns=fd, master=bridge)
            with pytest.raises(nl.NetlinkError) as info:
                nl.new_veth(r, host, "eth1", mtu=1450, host_mac=host_mac,
                            peer_mac=pod_mac, peer_netns=fd, master=bridge)
            assert info.value.errno == errno.EEXIST
            assert r.index(host) is not None and r.index("ksvt-none") is None
        with nl.rtnl(fd) as ns:
            with pytest.raises(nl.NetlinkError) as info:
                nl.pod_index(ns, "eth1")
            assert info.value.errno == errno.ENODEV
            index = nl.pod_index(ns, "eth0")
            nl.configure_pod(ns, index, ipaddress.IPv4Interface("10.97.0.7/24"),
                             GW.ip)
            with pytest.raises(nl.NetlinkError) as info:   # address taken
                nl.configure_pod(ns, index,
                                 ipaddress.IPv4Interface("10.97.0.7/24"), GW.ip)
            assert info.value.errno == errno.EEXIST
    (pod,) = ip_json("addr", "show", "eth0", netns=netns.name)
    assert pod["address"] == pod_mac and pod["mtu"] == 1450
    assert "UP" in pod["flags"]
    assert [(a["local"], a["prefixlen"]) for a in pod["addr_info"]
            if a["family"] == "inet"] == [("10.97.0.7", 24)]
    (lo,) = ip_json("link", "show", "lo", netns=netns.name)
    assert "UP" in lo["flags"]
    (default,) = ip_json("route", "show", "default", netns=netns.name)
    assert default["gateway"] == "10.97.0.1" and default["dev"] == "eth0"
    (link,) = ip_json("link", "show", host)
    assert link["master"] == test_bridge and link["address"] == host_mac
    with nl.rtnl() as r:
        assert nl.remove_link(r, host) is True
        assert nl.remove_link(r, host) is False
    assert "eth0" not in link_names(netns.name)


def test_raw_veth_with_a_vanished_master_leaves_nothing(
        netns: Netns, netns_factory: NetnsFactory) -> None:  # noqa: F811
    host = unique("ksvtv")
    netns_factory.track_link(host)
    with nl.open_netns(netns.path) as fd, nl.rtnl() as r:
        with pytest.raises(nl.NetlinkError) as info:
            nl.new_veth(r, host, "eth0", mtu=1500, host_mac=nl.random_mac(),
                        peer_mac=nl.random_mac(), peer_netns=fd,
                        master=0x7FFFFFF0)
    assert info.value.errno in (errno.EINVAL, errno.ENODEV)
    assert host not in link_names() and link_names(netns.name) == {"lo"}
