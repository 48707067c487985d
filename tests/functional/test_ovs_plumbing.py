"""OvsBinding's plumb and unplumb called directly, against a private Open
vSwitch and real namespaces, checked with ``ip`` and ``ovs-vsctl``: the
failures ADD shares with the bridge binding (:mod:`.binding.plumbing`).

Proves: a pod name already taken in the netns, or a container plumbed
twice, is AlreadyExists naming which name, and leaves no new host end and
no new port; a netns that already has a default route is AlreadyExists
too, the veth made for it rolled back; DEL twice is fine.
"""
from __future__ import annotations

import ipaddress
import secrets
from collections.abc import Iterator

import pytest

from kuryr_supervisor import errors
from kuryr_supervisor.cni.binding import OvsBinding
from kuryr_supervisor.cni.ovsdb import Ovsdb
from tests.fixtures.netns import Netns, NetnsFactory, ip, link_names
from tests.fixtures.ovs import PrivateOVS
from tests.functional.ovs_harness import MTU, ovs_fixture

pytestmark = pytest.mark.privileged

GW = ipaddress.IPv4Address("10.97.0.1")
ovs = pytest.fixture(ovs_fixture)


@pytest.fixture
def binding(ovs: PrivateOVS) -> Iterator[OvsBinding]:
    bridge = "ksvp" + secrets.token_hex(4)
    ovs.add_bridge(bridge)
    yield OvsBinding(bridge, MTU, ovsdb=Ovsdb(ovs.connection, 5.0),
                     tx_checksum_off="true")


def plumb(binding: OvsBinding, cid: str, ns_path: str, n: int) -> None:
    binding.plumb(container_id=cid, ifname="eth0", netns=ns_path,
                  address=ipaddress.IPv4Interface(f"10.97.0.{n + 2}/24"),
                  gateway=GW, iface_id=f"port-{cid}", owner=f"uid-{cid}")


def ports(ovs: PrivateOVS, binding: OvsBinding) -> set[str]:
    return set(ovs.vsctl("list-ports", binding.bridge).split())


def test_pod_name_taken_is_already_exists(
        ovs: PrivateOVS, binding: OvsBinding, netns: Netns) -> None:  # noqa: F811
    plumb(binding, "c1", netns.path, 0)
    with pytest.raises(errors.AlreadyExists,
                       match="interface eth0 already exists in netns"):
        plumb(binding, "c2", netns.path, 1)
    assert binding.host_ifname("c2", "eth0") not in link_names()
    assert ports(ovs, binding) == {binding.host_ifname("c1", "eth0")}
    assert link_names(netns.name) == {"lo", "eth0"}
    binding.unplumb(container_id="c1", ifname="eth0", netns=netns.path)
    binding.unplumb(container_id="c1", ifname="eth0", netns=None)
    assert ports(ovs, binding) == set()
    assert binding.host_ifname("c1", "eth0") not in link_names()


def test_same_container_twice_is_already_exists(
        ovs: PrivateOVS, binding: OvsBinding,
        netns_factory: NetnsFactory) -> None:  # noqa: F811
    ns1, ns2 = netns_factory.create(), netns_factory.create()
    plumb(binding, "c1", ns1.path, 0)
    host = binding.host_ifname("c1", "eth0")
    with pytest.raises(errors.AlreadyExists,
                       match=f"host interface {host} for c1/eth0"):
        plumb(binding, "c1", ns2.path, 1)
    assert host in link_names() and ports(ovs, binding) == {host}
    assert link_names(ns2.name) == {"lo"}
    binding.unplumb(container_id="c1", ifname="eth0", netns=ns1.path)
    assert host not in link_names()


def test_default_route_taken_is_already_exists_and_rolled_back(
        ovs: PrivateOVS, binding: OvsBinding, netns: Netns) -> None:  # noqa: F811
    ip("link", "add", "other0", "type", "veth", "peer", "name", "other1",
       netns=netns.name)
    ip("addr", "add", "10.96.0.2/24", "dev", "other0", netns=netns.name)
    ip("link", "set", "other0", "up", netns=netns.name)
    ip("route", "add", "default", "via", "10.96.0.1", netns=netns.name)
    with pytest.raises(errors.AlreadyExists,
                       match=f"netns {netns.path} already has a default route"):
        plumb(binding, "c1", netns.path, 0)
    assert binding.host_ifname("c1", "eth0") not in link_names()
    assert link_names(netns.name) == {"lo", "other0", "other1"}
    assert ports(ovs, binding) == set()
