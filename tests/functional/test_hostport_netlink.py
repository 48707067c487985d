"""The node port's netlink steps (:mod:`kuryr_supervisor.cni.netlink.
hostport`) against a real namespace, checked with ``ip``: the link set up
with its MAC and MTU, its one address (a stale one removed, nothing
written when all is right), the main table read back, a route replaced
rather than doubled, and deleted (another link's route to the same
destination left alone)."""
from __future__ import annotations

import ipaddress

import pytest

from kuryr_supervisor.cni import netlink as nl
from kuryr_supervisor.cni.netlink import hostport
from tests.fixtures.netns import Netns, ip, ip_json

pytestmark = pytest.mark.privileged

MAC = "fa:16:3e:00:00:06"
ADDRESS = ipaddress.IPv4Interface("10.98.0.6/24")
SERVICES = ipaddress.IPv4Network("10.96.0.0/12")
GATEWAY = ipaddress.IPv4Address("10.98.0.1")


def test_the_node_ports_link_address_and_routes(netns: Netns) -> None:
    ip("link", "add", "np0", "type", "veth", "peer", "name", "np1",
       netns=netns.name)
    ip("link", "set", "np1", "up", netns=netns.name)
    ip("addr", "add", "10.98.0.77/24", "dev", "np0", netns=netns.name)
    with nl.open_netns(netns.path) as fd, nl.rtnl(fd) as rt:
        link = nl.read_link(rt, "np0")
        assert link is not None and not link.up
        assert hostport.set_link(rt, link, mac=MAC, mtu=1442)
        assert hostport.set_address(rt, link, ADDRESS)
        link = nl.read_link(rt, "np0")
        assert link is not None
        assert (link.up, link.mac, link.mtu, link.addresses) == (
            True, MAC, 1442, (ADDRESS,))
        # All right already: nothing written.
        assert not hostport.set_link(rt, link, mac=MAC, mtu=1442)
        assert not hostport.set_address(rt, link, ADDRESS)
        # The pod subnet on-link, from the address.
        assert hostport.Route(ADDRESS.network, None, link.index) in \
            hostport.routes(rt)
        hostport.replace_route(rt, link.index, SERVICES, GATEWAY)
        hostport.replace_route(rt, link.index, SERVICES, GATEWAY)
        assert hostport.Route(SERVICES, GATEWAY, link.index) in \
            hostport.routes(rt)
    routes = [r for r in ip_json("-4", "route", "show", "table", "main",
                                 netns=netns.name)
              if r.get("dst") == str(SERVICES)]
    assert routes == [{"dst": str(SERVICES), "gateway": str(GATEWAY),
                       "dev": "np0", "protocol": "static", "flags": []}]


def test_a_service_route_deleted_and_anothers_left(netns: Netns) -> None:
    ip("link", "add", "np0", "type", "veth", "peer", "name", "np1",
       netns=netns.name)
    for dev, addr in (("np0", "10.98.0.6/24"), ("np1", "10.97.0.6/24")):
        ip("addr", "add", addr, "dev", dev, netns=netns.name)
        ip("link", "set", dev, "up", netns=netns.name)
    with nl.open_netns(netns.path) as fd, nl.rtnl(fd) as rt:
        link = nl.read_link(rt, "np0")
        other = nl.read_link(rt, "np1")
        assert link is not None and other is not None
        hostport.replace_route(rt, link.index, SERVICES, GATEWAY)
        assert hostport.delete_route(rt, link.index, SERVICES, GATEWAY)
        assert hostport.Route(SERVICES, GATEWAY, link.index) not in \
            hostport.routes(rt)
        assert not hostport.delete_route(rt, link.index, SERVICES, GATEWAY)
        # Someone else's route to that range (another link, another
        # gateway) is not ours to delete.
        theirs = ipaddress.IPv4Address("10.97.0.1")
        hostport.replace_route(rt, other.index, SERVICES, theirs)
        assert not hostport.delete_route(rt, link.index, SERVICES, GATEWAY)
        assert hostport.Route(SERVICES, theirs, other.index) in \
            hostport.routes(rt)
