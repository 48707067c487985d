"""Raw rtnetlink reads and the bridge: what a steady daemon does, without
pyroute2.

Why raw: the bridge's periodic check (every ADD may pass through it), the
Server's environment watch and the HealthManager's liveness probe run in
every idle daemon. Done with pyroute2, each of those processes imports it
(about 9 MiB of heap per process that imports it, some 160 modules, and an
asyncio loop per call). The few messages they need are fixed: one link by
name (kind, MAC, MTU, state, master), the IPv4 addresses of one link, and
creating and addressing a bridge. pyroute2 stays, imported lazily, for the
rarer reads that decode more (CHECK's routes, GC's link dump).

Invariants: every failure keeps its errno as :class:`NetlinkError`;
:func:`ensure_bridge` keeps the contract of its pyroute2 predecessor (safe
against a concurrent creator, MAC pinned on a fresh bridge, a previous
subnet's gateway address removed, never touches a link of another kind).
"""
from __future__ import annotations

import errno as errno_mod
import ipaddress
import struct
from collections.abc import Iterator

from kuryr_supervisor.cni.netlink.base import (
    AF_INET,
    Link,
    NetlinkError,
    WrongLinkKind,
    translated,
)
from kuryr_supervisor.cni.netlink.rtnl import (
    F_CREATE,
    F_EXCL,
    IFA_ADDRESS,
    IFA_LOCAL,
    IFADDR,
    IFF_UP,
    IFINFO,
    IFLA_ADDRESS,
    IFLA_IFNAME,
    IFLA_INFO_KIND,
    IFLA_LINKINFO,
    IFLA_MASTER,
    IFLA_MTU,
    RTM_NEWADDR,
    RTM_NEWLINK,
    Rtnl,
    ifname_attr,
    mac_attr,
    nlattr,
    rtnl,
)

_RTA = struct.Struct("=HH")
_RTM_DELADDR = 21
_IFA_MIN_SIZE = IFADDR.size


def attributes(data: memoryview) -> Iterator[tuple[int, memoryview]]:
    """(type, payload) of each rtattr in ``data`` (nested flag stripped)."""
    offset = 0
    while offset + _RTA.size <= len(data):
        size, kind = _RTA.unpack_from(data, offset)
        if size < _RTA.size:
            return
        yield kind & 0x3FFF, data[offset + _RTA.size:offset + size]
        offset += (size + 3) & ~3


def _text(payload: memoryview) -> str:
    return bytes(payload).split(b"\0", 1)[0].decode(errors="replace")


def _u32(payload: memoryview) -> int:
    return int(struct.unpack_from("=I", payload)[0])


def parse_link(payload: memoryview) -> Link:
    """A :class:`Link` (addresses not read) from an RTM_NEWLINK payload."""
    _, _, index, flags, _ = IFINFO.unpack_from(payload)
    name, kind, mac, mtu, master = "", "", "", 0, None
    for attr, value in attributes(payload[IFINFO.size:]):
        if attr == IFLA_IFNAME:
            name = _text(value)
        elif attr == IFLA_ADDRESS:
            mac = ":".join(f"{b:02x}" for b in bytes(value))
        elif attr == IFLA_MTU:
            mtu = _u32(value)
        elif attr == IFLA_MASTER:
            master = _u32(value)
        elif attr == IFLA_LINKINFO:
            for sub, data in attributes(value):
                if sub == IFLA_INFO_KIND:
                    kind = _text(data)
    return Link(name=name, index=int(index), kind=kind, mac=mac, mtu=mtu,
                up=bool(flags & IFF_UP), master=master)


def read_link(nl: Rtnl, ifname: str) -> Link | None:
    """``ifname`` with its IPv4 addresses (two requests), None if missing."""
    with translated(f"read {ifname}"):
        payload = nl.get_link(ifname)
        if payload is None:
            return None
        link = parse_link(payload)
        found = tuple(addresses(nl, link.index))
    return Link(name=link.name, index=link.index, kind=link.kind,
                mac=link.mac, mtu=link.mtu, up=link.up, master=link.master,
                addresses=found)


def addresses(nl: Rtnl, index: int) -> Iterator[ipaddress.IPv4Interface]:
    """The IPv4 addresses of link ``index`` (one address dump)."""
    body = IFADDR.pack(AF_INET, 0, 0, 0, 0)
    for payload in nl.dump(22, body):   # RTM_GETADDR
        if len(payload) < _IFA_MIN_SIZE:
            continue
        family, prefixlen, _, _, owner = IFADDR.unpack_from(payload)
        if family != AF_INET or owner != index:
            continue
        local = address = None
        for attr, value in attributes(payload[IFADDR.size:]):
            if attr == IFA_LOCAL:
                local = bytes(value)
            elif attr == IFA_ADDRESS:
                address = bytes(value)
        raw = local or address
        if raw is not None and len(raw) == 4:
            yield ipaddress.IPv4Interface(
                f"{ipaddress.IPv4Address(raw)}/{prefixlen}")


def address_msg(index: int, address: ipaddress.IPv4Interface) -> bytes:
    ip = address.ip.packed
    return (IFADDR.pack(AF_INET, address.network.prefixlen, 0, 0, index)
            + nlattr(IFA_LOCAL, ip) + nlattr(IFA_ADDRESS, ip))


def ensure_bridge(nl: Rtnl, name: str,
                  gateway: ipaddress.IPv4Interface) -> int:
    """Create bridge ``name`` if missing, give it ``gateway`` (removing any
    other IPv4 address: the gateway of a previous subnet), set it up; its
    index.

    Safe against a concurrent creator: EEXIST on the link or the address
    means someone else got there first. A fresh bridge gets its own MAC
    pinned, or the kernel would let it follow the lowest port MAC and every
    pod would see its gateway's MAC change as pods come and go.
    """
    create = (IFINFO.pack(0, 0, 0, 0, 0) + ifname_attr(name)
              + nlattr(IFLA_LINKINFO, nlattr(IFLA_INFO_KIND, b"bridge\0")))
    created = True
    with translated(f"create bridge {name}"):
        try:
            nl.request((RTM_NEWLINK, F_CREATE | F_EXCL, create))
        except OSError as exc:
            if exc.errno != errno_mod.EEXIST:
                raise
            created = False
    link = read_link(nl, name)
    if link is None:
        raise NetlinkError(f"bridge {name} vanished while being set up",
                           errno_mod.ENODEV)
    if link.kind != "bridge":
        raise WrongLinkKind(f"{name} exists and is a {link.kind or 'plain'} "
                            "link, not a bridge", errno_mod.EEXIST)
    idx = link.index
    if created and link.mac:
        with translated(f"pin MAC of bridge {name}"):
            nl.request((RTM_NEWLINK, 0, IFINFO.pack(0, 0, idx, 0, 0)
                        + mac_attr(link.mac)))
    if gateway not in link.addresses:
        with translated(f"add {gateway} to {name}"):
            try:
                nl.request((RTM_NEWADDR, F_CREATE | F_EXCL,
                            address_msg(idx, gateway)))
            except OSError as exc:
                if exc.errno != errno_mod.EEXIST:
                    raise
        # A new gateway means the subnet changed: the old gateway address
        # would keep routing the old subnet to this bridge.
        for old in link.addresses:
            if old != gateway:
                with translated(f"remove old gateway {old} from {name}"):
                    nl.request((_RTM_DELADDR, 0, address_msg(idx, old)))
    if not link.up:
        with translated(f"set {name} up"):
            nl.request((RTM_NEWLINK, 0,
                        IFINFO.pack(0, 0, idx, IFF_UP, IFF_UP)))
    return idx


def probe() -> None:
    """Prove netlink is usable: open a socket and read the loopback.

    The liveness check (the replacement of Kuryr's IPDB-per-probe): one
    socket and one RTM_GETLINK, no library state.
    """
    try:
        with rtnl() as nl, translated("read lo"):
            if nl.get_link("lo") is None:
                raise NetlinkError("netlink answered but has no 'lo' link")
    except NetlinkError:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure is "unusable"
        raise NetlinkError(f"netlink unusable: {exc}",
                           getattr(exc, "errno", None)) from exc


def link_kind(ifname: str) -> str | None:
    """The kind of host link ``ifname`` ("" for a plain one), None if
    there is none: what the bridge-kind environment check asks."""
    with rtnl() as nl, translated(f"read {ifname}"):
        link = read_link(nl, ifname)
    return None if link is None else link.kind


