"""BridgeBinding against real namespaces, checked with the ``ip`` tool."""
from __future__ import annotations

import concurrent.futures
import ipaddress
import statistics
import time
import types

import pytest

from kuryr_supervisor import errors
from kuryr_supervisor.cni import netlink
from kuryr_supervisor.cni.binding import BRIDGE_RECHECK, HOST_PREFIX, BridgeBinding
from tests.fixtures.netns import (
    Netns,
    NetnsFactory,
    ip,
    ip_json,
    link_names,
)

pytestmark = pytest.mark.privileged

GW = ipaddress.IPv4Address("10.98.0.1")
MTU = 1400


def addr(n: int) -> ipaddress.IPv4Interface:
    return ipaddress.IPv4Interface(f"10.98.{n // 250}.{n % 250 + 2}/16")


def plumb(binding: BridgeBinding, cid: str, ns_path: str, n: int = 0,
          ifname: str = "eth0") -> None:
    binding.plumb(container_id=cid, ifname=ifname, netns=ns_path,
                  address=addr(n), gateway=GW)


def on_bridge(bridge: str) -> set[str]:
    return {p["ifname"] for p in ip_json("link", "show", "master", bridge)}


def test_host_ifname_is_deterministic_and_short() -> None:
    a = BridgeBinding.host_ifname("c" * 64, "eth0")
    assert a == BridgeBinding.host_ifname("c" * 64, "eth0")
    assert a != BridgeBinding.host_ifname("c" * 64, "eth1")
    assert a.startswith(HOST_PREFIX) and len(a) <= 15


def test_plumb_check_unplumb(netns: Netns, test_bridge: str) -> None:  # noqa: F811
    binding = BridgeBinding(test_bridge, MTU)
    result = binding.plumb(container_id="c1", ifname="eth0",
                           netns=netns.path, address=addr(0), gateway=GW)

    (pod,) = ip_json("addr", "show", "eth0", netns=netns.name)
    assert pod["mtu"] == MTU and "UP" in pod["flags"]
    assert pod["address"] == result.pod_mac
    assert {"local": "10.98.0.2", "prefixlen": 16}.items() <= {
        k: v for a in pod["addr_info"] if a["family"] == "inet"
        for k, v in a.items()}.items()
    (default,) = ip_json("route", "show", "default", netns=netns.name)
    assert default["gateway"] == str(GW) and default["dev"] == "eth0"
    (lo,) = ip_json("link", "show", "lo", netns=netns.name)
    assert "UP" in lo["flags"]
    (host,) = ip_json("link", "show", result.host_ifname)
    assert host["master"] == test_bridge and host["mtu"] == MTU
    assert host["address"] == result.host_mac and "UP" in host["flags"]
    (br,) = ip_json("addr", "show", test_bridge)
    assert any(a["local"] == str(GW) and a["prefixlen"] == 16
               for a in br["addr_info"])
    assert result.host_ifname in binding.host_interfaces()

    binding.check(container_id="c1", ifname="eth0", netns=netns.path,
                  address=addr(0), gateway=GW)
    with pytest.raises(errors.PlumbingError, match="lacks"):
        binding.check(container_id="c1", ifname="eth0", netns=netns.path,
                      address=addr(9), gateway=GW)

    binding.unplumb(container_id="c1", ifname="eth0", netns=netns.path)
    assert "eth0" not in link_names(netns.name)
    assert result.host_ifname not in link_names()
    binding.unplumb(container_id="c1", ifname="eth0", netns=netns.path)
    with pytest.raises(errors.PlumbingError, match="no eth0"):
        binding.check(container_id="c1", ifname="eth0", netns=netns.path,
                      address=addr(0), gateway=GW)


def test_check_reports_changed_mtu_and_missing_route(
        netns: Netns, test_bridge: str) -> None:  # noqa: F811
    binding = BridgeBinding(test_bridge, MTU)
    plumb(binding, "c1", netns.path)
    ip("link", "set", "eth0", "mtu", "1300", netns=netns.name)
    ip("route", "del", "default", netns=netns.name)
    with pytest.raises(errors.PlumbingError) as info:
        binding.check(container_id="c1", ifname="eth0", netns=netns.path,
                      address=addr(0), gateway=GW)
    assert "mtu 1300" in info.value.msg and "default route" in info.value.msg


def test_leaked_host_end_is_listed_and_removed(
        netns: Netns, test_bridge: str) -> None:  # noqa: F811
    binding = BridgeBinding(test_bridge, MTU)
    plumb(binding, "c1", netns.path)
    host = binding.host_ifname("c1", "eth0")
    assert host in binding.host_interfaces()
    assert test_bridge not in binding.host_interfaces()
    binding.remove_host_interface(host)
    binding.remove_host_interface(host)
    assert host not in binding.host_interfaces()
    assert "eth0" not in link_names(netns.name)
    with pytest.raises(ValueError):
        binding.remove_host_interface(test_bridge[1:])


def test_unplumb_after_netns_deleted(netns: Netns, test_bridge: str) -> None:  # noqa: F811
    binding = BridgeBinding(test_bridge, MTU)
    plumb(binding, "c1", netns.path)
    host = binding.host_ifname("c1", "eth0")
    ip("netns", "del", netns.name)
    binding.unplumb(container_id="c1", ifname="eth0", netns=netns.path)
    binding.unplumb(container_id="c1", ifname="eth0", netns=None)
    assert host not in link_names()


def test_plumb_into_missing_netns_leaves_nothing(
        test_bridge: str) -> None:  # noqa: F811
    binding = BridgeBinding(test_bridge, MTU)
    with pytest.raises(errors.ContainerUnknown):
        plumb(binding, "c1", "/var/run/netns/ksvt-does-not-exist")
    with pytest.raises(errors.ContainerUnknown):
        plumb(binding, "c1", "/proc/999999999/ns/net")
    # Other test runs may add links meanwhile: look for ours by name.
    assert binding.host_ifname("c1", "eth0") not in link_names()
    assert test_bridge not in link_names()
    with pytest.raises(errors.ContainerUnknown):
        binding.check(container_id="c1", ifname="eth0",
                      netns="/var/run/netns/ksvt-does-not-exist",
                      address=addr(0), gateway=GW)


def test_netns_given_as_proc_pid_path(netns: Netns, test_bridge: str) -> None:  # noqa: F811
    import subprocess
    proc = subprocess.Popen(["ip", "netns", "exec", netns.name,
                             "sleep", "30"])
    try:
        time.sleep(0.2)
        binding = BridgeBinding(test_bridge, MTU)
        plumb(binding, "c1", f"/proc/{proc.pid}/ns/net")
        assert "eth0" in link_names(netns.name)
        binding.unplumb(container_id="c1", ifname="eth0", netns=None)
    finally:
        proc.kill()
        proc.wait()


def test_duplicate_ifname_is_already_exists(netns: Netns, test_bridge: str) -> None:  # noqa: F811
    binding = BridgeBinding(test_bridge, MTU)
    plumb(binding, "c1", netns.path)
    (first,) = ip_json("addr", "show", "eth0", netns=netns.name)
    with pytest.raises(errors.AlreadyExists):
        plumb(binding, "c2", netns.path, n=1)
    (after,) = ip_json("addr", "show", "eth0", netns=netns.name)
    assert after == first
    assert binding.host_ifname("c2", "eth0") not in link_names()
    assert on_bridge(test_bridge) == {binding.host_ifname("c1", "eth0")}
    assert link_names(netns.name) == {"lo", "eth0"}


def test_same_container_twice_is_already_exists(
        netns_factory: NetnsFactory, test_bridge: str) -> None:  # noqa: F811
    binding = BridgeBinding(test_bridge, MTU)
    ns1, ns2 = netns_factory.create(), netns_factory.create()
    plumb(binding, "c1", ns1.path)
    with pytest.raises(errors.AlreadyExists):
        plumb(binding, "c1", ns2.path, n=1)
    assert binding.host_ifname("c1", "eth0") in on_bridge(test_bridge)
    assert link_names(ns2.name) == {"lo"}


def test_fifty_parallel_plumbs(
        netns_factory: NetnsFactory, test_bridge: str) -> None:  # noqa: F811
    binding = BridgeBinding(test_bridge, MTU)
    namespaces = [netns_factory.create() for _ in range(50)]
    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        list(pool.map(lambda i: plumb(binding, f"c{i}", namespaces[i].path,
                                      n=i), range(50)))
    hosts = {binding.host_ifname(f"c{i}", "eth0") for i in range(50)}
    assert on_bridge(test_bridge) == hosts
    for i, ns in enumerate(namespaces):
        (pod,) = ip_json("addr", "show", "eth0", netns=ns.name)
        assert addr(i).ip.compressed in [a["local"] for a in pod["addr_info"]]
    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        list(pool.map(lambda i: binding.unplumb(
            container_id=f"c{i}", ifname="eth0", netns=None), range(50)))
    assert on_bridge(test_bridge) == set()


class FailingNetlink(types.SimpleNamespace):
    """The real netlink module, except that one step raises."""

    def __init__(self, step: str) -> None:
        super().__init__(**{k: getattr(netlink, k) for k in dir(netlink)
                            if not k.startswith("__")})

        def fail(*args: object, **kwargs: object) -> None:
            raise netlink.NetlinkError(f"injected failure in {step}", 5)
        setattr(self, step, fail)


@pytest.mark.parametrize("step", ["configure_pod", "pod_index"])
def test_failure_half_way_rolls_back(
        netns: Netns, test_bridge: str, step: str) -> None:  # noqa: F811
    binding = BridgeBinding(test_bridge, MTU,
                            netlink_module=FailingNetlink(step))
    with pytest.raises(errors.PlumbingError) as info:
        plumb(binding, "c1", netns.path)
    assert info.value.details == "errno=5"
    assert binding.host_ifname("c1", "eth0") not in link_names()
    assert link_names(netns.name) == {"lo"}
    assert on_bridge(test_bridge) == set()


def test_timing_plumb_unplumb(netns: Netns, test_bridge: str) -> None:  # noqa: F811
    binding = BridgeBinding(test_bridge, MTU)
    plumb(binding, "warm", netns.path)  # creates the bridge
    binding.unplumb(container_id="warm", ifname="eth0", netns=netns.path)
    times = []
    for _ in range(30):
        start = time.perf_counter()
        plumb(binding, "c1", netns.path)
        binding.unplumb(container_id="c1", ifname="eth0", netns=netns.path)
        times.append(time.perf_counter() - start)
    print(f"\nplumb+unplumb median {statistics.median(times) * 1000:.1f} ms"
          f" (max {max(times) * 1000:.1f} ms)")
    assert statistics.median(times) < 1.0


def test_bridge_deleted_underneath_is_recreated(
        netns_factory: NetnsFactory, test_bridge: str) -> None:  # noqa: F811
    binding = BridgeBinding(test_bridge, MTU)
    ns1, ns2 = netns_factory.create(), netns_factory.create()
    plumb(binding, "c1", ns1.path)
    ip("link", "del", test_bridge)        # the cached index is now stale
    plumb(binding, "c2", ns2.path, n=1)
    assert on_bridge(test_bridge) == {binding.host_ifname("c2", "eth0")}
    (br,) = ip_json("addr", "show", test_bridge)
    assert "UP" in br["flags"] and any(
        a["local"] == str(GW) for a in br["addr_info"])


def test_bridge_drift_is_repaired_after_the_recheck_interval(
        netns_factory: NetnsFactory, test_bridge: str) -> None:  # noqa: F811
    now = [0.0]
    binding = BridgeBinding(test_bridge, MTU, clock=lambda: now[0])
    ns1, ns2, ns3 = (netns_factory.create() for _ in range(3))
    plumb(binding, "c1", ns1.path)
    ip("addr", "flush", "dev", test_bridge)
    plumb(binding, "c2", ns2.path, n=1)   # within the interval: trusted
    now[0] += BRIDGE_RECHECK
    plumb(binding, "c3", ns3.path, n=2)   # past it: checked and repaired
    (br,) = ip_json("addr", "show", test_bridge)
    assert any(a["local"] == str(GW) for a in br["addr_info"])


def test_veth_creation_failure_leaves_nothing(
        netns: Netns, test_bridge: str) -> None:  # noqa: F811
    binding = BridgeBinding(test_bridge, MTU,
                            netlink_module=FailingNetlink("new_veth"))
    with pytest.raises(errors.PlumbingError):
        plumb(binding, "c1", netns.path)
    assert binding.host_ifname("c1", "eth0") not in link_names()
    assert link_names(netns.name) == {"lo"}
