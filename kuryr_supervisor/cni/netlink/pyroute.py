"""The pyroute2 half of the netlink adapter: the only place pyroute2 is
imported.

Handles are short-lived (opened per operation or per phase of an
operation, closed after), so no worker holds netlink state across a fork or
a hang. They serve everything that reads and decodes: CHECK, GC, the
bridge's full check and the liveness probe. A handle in a namespace is given
a socket made inside it (:func:`~.base.netns_socket`) through
``IPRoute(use_socket=...)``: pyroute2's own ``IPRoute(netns=...)`` forks a
helper process per handle, about 15 times slower, forks a multi-threaded
daemon, and with its default ``flags=O_CREAT`` would *create* a namespace
that is missing.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno as errno_mod
import ipaddress
import os
import socket
from collections.abc import Iterator
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError as _PyrouteNetlinkError

from kuryr_supervisor.cni.netlink.base import (
    AF_INET,
    Link,
    NetlinkError,
    netns_socket,
    translated,
)


@dataclasses.dataclass(frozen=True)
class Route:
    """One IPv4 route of the main table (``dst`` None: the default route)."""

    dst: ipaddress.IPv4Network | None
    gateway: ipaddress.IPv4Address | None
    oif: int | None


@contextlib.contextmanager
def handle(netns: int | None = None) -> Iterator[Any]:
    """A short-lived IPRoute in the host namespace or in ``netns`` (an fd)."""
    where = "host" if netns is None else "netns"
    sock: socket.socket | None = None
    with translated(f"open netlink in {where}"):
        try:
            if netns is None:
                ipr = IPRoute()
            else:
                sock = netns_socket(netns)
                ipr = IPRoute(use_socket=sock)
        except BaseException:
            if sock is not None:
                sock.close()
            raise
    try:
        yield ipr
    finally:
        with contextlib.suppress(Exception):
            ipr.close()
        if sock is not None:
            sock.close()


def _index(ipr: Any, ifname: str) -> int:
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise NetlinkError(f"link {ifname}: {os.strerror(errno_mod.ENODEV)}",
                           errno_mod.ENODEV)
    return int(found[0])


def link_index(ipr: Any, ifname: str) -> int | None:
    """The ifindex of ``ifname``, None when there is no such link."""
    with translated(f"look up {ifname}"):
        found = ipr.link_lookup(ifname=ifname)
    return int(found[0]) if found else None


def create_veth(ipr: Any, host_ifname: str, peer_ifname: str, *, mtu: int,
                peer_netns: int | None = None) -> None:
    """Create a veth pair; the peer is born in ``peer_netns`` when given.

    Creating the peer directly inside the pod namespace (instead of creating
    it here and moving it) means it never appears in the host namespace,
    where another agent could grab it, and saves a netlink round trip.
    """
    peer: dict[str, Any] = {"ifname": peer_ifname, "mtu": mtu}
    if peer_netns is not None:
        peer["net_ns_fd"] = peer_netns
    with translated(f"create veth {host_ifname}/{peer_ifname}"):
        ipr.link("add", ifname=host_ifname, kind="veth", mtu=mtu, peer=peer)


def move_link(ipr: Any, ifname: str, netns: int) -> None:
    """Move ``ifname`` from the handle's namespace into ``netns`` (an fd)."""
    with translated(f"move {ifname} into netns"):
        ipr.link("set", index=_index(ipr, ifname), net_ns_fd=netns)


def set_link(ipr: Any, ifname: str, *, new_name: str | None = None,
             mtu: int | None = None, up: bool | None = None,
             master: int | None = None) -> None:
    """Rename, set MTU, enslave or bring a link up/down (one message)."""
    attrs: dict[str, Any] = {}
    if new_name is not None:
        attrs["ifname"] = new_name
    if mtu is not None:
        attrs["mtu"] = mtu
    if master is not None:
        attrs["master"] = master
    if up is not None:
        attrs["state"] = "up" if up else "down"
    with translated(f"set {ifname} {sorted(attrs)}"):
        ipr.link("set", index=_index(ipr, ifname), **attrs)


def add_address(ipr: Any, ifname: str, address: ipaddress.IPv4Interface, *,
                exist_ok: bool = False) -> None:
    """Add ``address`` (with its prefix) to ``ifname``."""
    with translated(f"add {address} to {ifname}"):
        try:
            ipr.addr("add", index=_index(ipr, ifname),
                     address=str(address.ip),
                     prefixlen=address.network.prefixlen)
        except _PyrouteNetlinkError as exc:
            if not (exist_ok and exc.code == errno_mod.EEXIST):
                raise


def add_default_route(ipr: Any, ifname: str,
                      gateway: ipaddress.IPv4Address) -> None:
    """Add the IPv4 default route via ``gateway`` out of ``ifname``."""
    with translated(f"add default route via {gateway} on {ifname}"):
        ipr.route("add", dst="0.0.0.0/0", gateway=str(gateway),
                  oif=_index(ipr, ifname))


def delete_link(ipr: Any, ifname: str) -> bool:
    """Delete ``ifname``; False when it was already gone (idempotent)."""
    with translated(f"delete {ifname}"):
        try:
            ipr.link("del", index=_index(ipr, ifname))
        except NetlinkError as exc:
            if exc.errno == errno_mod.ENODEV:
                return False
            raise
        except _PyrouteNetlinkError as exc:
            if exc.code == errno_mod.ENODEV:  # raced with another deleter
                return False
            raise
    return True


def _link_from_msg(msg: Any, addresses: tuple[ipaddress.IPv4Interface, ...]
                   ) -> Link:
    info = msg.get_attr("IFLA_LINKINFO")
    kind = (info.get_attr("IFLA_INFO_KIND") if info is not None else "") or ""
    return Link(name=msg.get_attr("IFLA_IFNAME"), index=int(msg["index"]),
                kind=kind, mac=msg.get_attr("IFLA_ADDRESS") or "",
                mtu=int(msg.get_attr("IFLA_MTU")),
                up=bool(msg["flags"] & 1), master=msg.get_attr("IFLA_MASTER"),
                addresses=addresses)


def get_link(ipr: Any, ifname: str) -> Link:
    """Kind, MAC, MTU, state, master and IPv4 addresses of ``ifname``."""
    with translated(f"read {ifname}"):
        idx = _index(ipr, ifname)
        (msg,) = ipr.get_links(idx)
        addrs = tuple(
            ipaddress.IPv4Interface(f"{a.get_attr('IFA_ADDRESS')}/"
                                    f"{a['prefixlen']}")
            for a in ipr.get_addr(family=AF_INET, index=idx))
    return _link_from_msg(msg, addrs)


def list_links(ipr: Any, prefix: str = "") -> list[Link]:
    """Every link whose name starts with ``prefix`` (addresses not read)."""
    with translated(f"list links {prefix}*"):
        msgs = ipr.get_links()
    links = [_link_from_msg(m, ()) for m in msgs]
    return [link for link in links if link.name.startswith(prefix)]


def routes(ipr: Any) -> list[Route]:
    """IPv4 routes of the main table."""
    out = []
    with translated("read routes"):
        for msg in ipr.get_routes(family=AF_INET, table=254):
            dst = msg.get_attr("RTA_DST")
            gw = msg.get_attr("RTA_GATEWAY")
            out.append(Route(
                dst=(ipaddress.IPv4Network(f"{dst}/{msg['dst_len']}")
                     if dst is not None else None),
                gateway=ipaddress.IPv4Address(gw) if gw else None,
                oif=msg.get_attr("RTA_OIF")))
    return out
