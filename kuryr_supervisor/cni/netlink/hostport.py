"""A port of the node's own, in the node's namespace, kept as it should be
(the node port of the OVS binding): its link's MAC, MTU and state, its one
address, and its routes, over the raw socket (:mod:`.rtnl`: the
HealthManager that keeps it checks it every second and imports no
pyroute2, see :mod:`.links`).

:func:`routes` reads the main table (one dump); :func:`set_link` and
:func:`set_address` write only what differs; :func:`replace_route` makes
a route through the link (``NLM_F_REPLACE``: whatever held that
destination is replaced, so no second route for it is ever made);
:func:`delete_route` takes one of them out again.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import struct

from kuryr_supervisor.cni.netlink.base import AF_INET, Link, translated
from kuryr_supervisor.cni.netlink.links import address_msg, attributes
from kuryr_supervisor.cni.netlink.rtnl import (
    F_CREATE,
    IFF_UP,
    IFINFO,
    IFLA_MTU,
    RTM_NEWADDR,
    RTM_NEWLINK,
    Rtnl,
    mac_attr,
    nlattr,
    u32_attr,
)

_RTMSG = struct.Struct("=BBBBBBBBI")
_RTM_DELADDR, _RTM_NEWROUTE, _RTM_DELROUTE, _RTM_GETROUTE = 21, 24, 25, 26
_F_REPLACE = 0x100
_RTA_DST, _RTA_OIF, _RTA_GATEWAY = 1, 4, 5
_RT_TABLE_MAIN, _RTPROT_STATIC, _RT_SCOPE_UNIVERSE, _RTN_UNICAST = \
    254, 4, 0, 1


@dataclasses.dataclass(frozen=True)
class Route:
    """A route of the main table (``gateway`` None: on-link)."""

    dst: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address | None
    oif: int | None


def routes(nl: Rtnl) -> list[Route]:
    """The IPv4 routes of the main table (one dump)."""
    out = []
    with translated("read routes"):
        for payload in nl.dump(_RTM_GETROUTE,
                               _RTMSG.pack(AF_INET, 0, 0, 0, 0, 0, 0, 0, 0)):
            if len(payload) < _RTMSG.size:
                continue
            family, dst_len, _, _, table, *_ = _RTMSG.unpack_from(payload)
            if family != AF_INET or table != _RT_TABLE_MAIN:
                continue
            dst = gateway = oif = None
            for attr, value in attributes(payload[_RTMSG.size:]):
                if attr == _RTA_DST and len(value) == 4:
                    dst = ipaddress.IPv4Address(bytes(value))
                elif attr == _RTA_GATEWAY and len(value) == 4:
                    gateway = ipaddress.IPv4Address(bytes(value))
                elif attr == _RTA_OIF and len(value) == 4:
                    oif = struct.unpack("=I", bytes(value))[0]
            out.append(Route(ipaddress.IPv4Network(
                f"{dst or '0.0.0.0'}/{dst_len}"), gateway, oif))
    return out


def set_link(nl: Rtnl, link: Link, *, mac: str, mtu: int) -> bool:
    """``link`` up with ``mac`` and ``mtu``; False when it already was."""
    if link.up and link.mac.lower() == mac.lower() and link.mtu == mtu:
        return False
    body = (IFINFO.pack(0, 0, link.index, IFF_UP, IFF_UP) + mac_attr(mac)
            + u32_attr(IFLA_MTU, mtu))
    with translated(f"set {link.name} up, {mac}, mtu {mtu}"):
        nl.request((RTM_NEWLINK, 0, body))
    return True


def set_address(nl: Rtnl, link: Link,
                address: ipaddress.IPv4Interface) -> bool:
    """``address`` the link's only IPv4 address (its prefix route comes
    with it); False when it already was."""
    stale = [a for a in link.addresses if a != address]
    if not stale and address in link.addresses:
        return False
    msgs = [(_RTM_DELADDR, 0, address_msg(link.index, a)) for a in stale]
    if address not in link.addresses:
        msgs.append((RTM_NEWADDR, F_CREATE, address_msg(link.index,
                                                         address)))
    with translated(f"set {link.name}'s address to {address}"):
        nl.request(*msgs)
    return True


def replace_route(nl: Rtnl, index: int, dst: ipaddress.IPv4Network,
                  gateway: ipaddress.IPv4Address) -> None:
    """``dst`` via ``gateway`` out of link ``index``, replacing whatever
    route the main table held for ``dst``."""
    body = (_RTMSG.pack(AF_INET, dst.prefixlen, 0, 0, _RT_TABLE_MAIN,
                        _RTPROT_STATIC, _RT_SCOPE_UNIVERSE, _RTN_UNICAST, 0)
            + nlattr(_RTA_DST, dst.network_address.packed)
            + nlattr(_RTA_GATEWAY, gateway.packed) + u32_attr(_RTA_OIF, index))
    with translated(f"route {dst} via {gateway}"):
        nl.request((_RTM_NEWROUTE, F_CREATE | _F_REPLACE, body))


def delete_route(nl: Rtnl, index: int, dst: ipaddress.IPv4Network,
                 gateway: ipaddress.IPv4Address) -> bool:
    """The main table's route to ``dst`` via ``gateway`` out of link
    ``index`` deleted; whether there was one (a route of that destination
    through another link or gateway is someone else's, left alone)."""
    if Route(dst, gateway, index) not in routes(nl):
        return False
    body = (_RTMSG.pack(AF_INET, dst.prefixlen, 0, 0, _RT_TABLE_MAIN,
                        _RTPROT_STATIC, _RT_SCOPE_UNIVERSE, _RTN_UNICAST, 0)
            + nlattr(_RTA_DST, dst.network_address.packed)
            + nlattr(_RTA_GATEWAY, gateway.packed) + u32_attr(_RTA_OIF, index))
    with translated(f"delete route {dst} via {gateway}"):
        nl.request((_RTM_DELROUTE, 0, body))
    return True
