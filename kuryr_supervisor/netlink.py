"""The only module that imports pyroute2.

Handles are short-lived (opened per operation or per phase of an operation,
closed after), so no worker holds netlink state across a fork or a hang.
Every pyroute2 or OS failure leaves this module as a :class:`NetlinkError`
carrying the errno (``EEXIST``, ``ENODEV``, ``ENOENT`` ...) so callers decide
by errno, never by message text. A network namespace that does not exist is a
:class:`NetnsNotFound`.

Namespaces are passed as an open file descriptor (see :func:`open_netns`):
the caller opens the path given by the runtime (``/var/run/netns/x`` or
``/proc/<pid>/ns/net``) once, so every step of an operation talks to the same
namespace even if the path is unlinked meanwhile. A netlink socket belongs to
the namespace it was created in, so a throwaway thread enters the namespace
(``setns`` moves only the calling thread), creates the socket and ends; the
socket is handed to ``IPRoute(use_socket=...)``. pyroute2's own
``IPRoute(netns=...)`` forks a helper process per handle instead, which is
about 15 times slower and forks a multi-threaded daemon; and with its default
``flags=O_CREAT`` it would *create* a namespace that is missing.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno as errno_mod
import ipaddress
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError as _PyrouteNetlinkError

AF_INET = 2
CLONE_NEWNET = 0x40000000
NETLINK_ROUTE = 0
# Failing to open a namespace path for these reasons says nothing about
# whether the namespace exists.
_NOT_GONE = frozenset({errno_mod.EACCES, errno_mod.EPERM, errno_mod.EMFILE,
                       errno_mod.ENFILE, errno_mod.ENOMEM, errno_mod.EINTR})


class NetlinkError(Exception):
    """A netlink operation failed; ``errno`` is kept when known."""

    def __init__(self, msg: str, errno: int | None = None) -> None:
        super().__init__(msg)
        self.errno = errno


class NetnsNotFound(NetlinkError):
    """The network namespace path does not exist or is no namespace."""


@dataclasses.dataclass(frozen=True)
class Link:
    """What CHECK and GC need to know about one interface."""

    name: str
    index: int
    kind: str
    mac: str
    mtu: int
    up: bool
    master: int | None
    addresses: tuple[ipaddress.IPv4Interface, ...] = ()


@dataclasses.dataclass(frozen=True)
class Route:
    """One IPv4 route of the main table (``dst`` None: the default route)."""

    dst: ipaddress.IPv4Network | None
    gateway: ipaddress.IPv4Address | None
    oif: int | None


def probe() -> None:
    """Prove netlink is usable: open an IPRoute socket and read the loopback.

    Used by the liveness check (the replacement of Kuryr's IPDB-per-probe).
    """
    try:
        with IPRoute() as ipr:
            if not ipr.link_lookup(ifname="lo"):
                raise NetlinkError("netlink answered but has no 'lo' link")
    except NetlinkError:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure is "unusable"
        raise NetlinkError(f"netlink unusable: {exc}",
                           getattr(exc, "code", None)) from exc


def _errno_of(exc: BaseException) -> int | None:
    if isinstance(exc, _PyrouteNetlinkError):
        return int(exc.code)
    return getattr(exc, "errno", None)


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    """Turn any pyroute2/OS failure inside the block into NetlinkError."""
    try:
        yield
    except NetlinkError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyroute2 raises many kinds
        code = _errno_of(exc)
        reason = os.strerror(code) if code else str(exc) or type(exc).__name__
        raise NetlinkError(f"{what}: {reason}", code) from exc


@contextlib.contextmanager
def open_netns(path: str) -> Iterator[int]:
    """Open a namespace path for the duration of the block; yield its fd.

    Raises NetnsNotFound when the path is missing (netns deleted, process
    gone) or is a file that is no namespace (a stale bind-mount target).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        cls = NetlinkError if exc.errno in _NOT_GONE else NetnsNotFound
        raise cls(f"netns {path}: {exc.strerror}", exc.errno) from exc
    try:
        nsfs = os.stat("/proc/self/ns/net").st_dev
        if os.fstat(fd).st_dev != nsfs:
            raise NetnsNotFound(f"netns {path}: not a namespace file",
                                errno_mod.EINVAL)
        yield fd
    finally:
        os.close(fd)


def _setns(fd: int) -> None:
    if hasattr(os, "setns"):  # Python >= 3.12
        os.setns(fd, CLONE_NEWNET)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _netns_socket(netns: int) -> socket.socket:
    """A NETLINK_ROUTE socket inside ``netns``, made by a throwaway thread."""
    box: dict[str, Any] = {}

    def enter_and_create() -> None:
        try:
            _setns(netns)
            box["sock"] = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM,
                                        NETLINK_ROUTE)
        except BaseException as exc:  # noqa: BLE001 - re-raised by caller
            box["exc"] = exc

    thread = threading.Thread(target=enter_and_create, name="netns-socket")
    thread.start()
    thread.join()
    if "exc" in box:
        raise box["exc"]
    return box["sock"]  # type: ignore[no-any-return]


@contextlib.contextmanager
def handle(netns: int | None = None) -> Iterator[Any]:
    """A short-lived IPRoute in the host namespace or in ``netns`` (an fd)."""
    where = "host" if netns is None else "netns"
    sock: socket.socket | None = None
    with _translated(f"open netlink in {where}"):
        try:
            if netns is None:
                ipr = IPRoute()
            else:
                sock = _netns_socket(netns)
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
    with _translated(f"look up {ifname}"):
        found = ipr.link_lookup(ifname=ifname)
    return int(found[0]) if found else None


def ensure_bridge(ipr: Any, name: str,
                  gateway: ipaddress.IPv4Interface) -> int:
    """Create bridge ``name`` if missing, give it ``gateway``, set it up.

    Safe against a concurrent creator: EEXIST on the link or the address
    means someone else got there first. A fresh bridge gets its own MAC
    pinned, or the kernel would let it follow the lowest port MAC and every
    pod would see its gateway's MAC change as pods come and go.
    """
    with _translated(f"create bridge {name}"):
        try:
            ipr.link("add", ifname=name, kind="bridge")
            created = True
        except _PyrouteNetlinkError as exc:
            if exc.code != errno_mod.EEXIST:
                raise
            created = False
        idx = _index(ipr, name)
    link = get_link(ipr, name)
    if link.kind != "bridge":
        raise NetlinkError(f"{name} exists and is a {link.kind or 'plain'} "
                           "link, not a bridge", errno_mod.EEXIST)
    if created:
        with _translated(f"pin MAC of bridge {name}"):
            ipr.link("set", index=idx, address=link.mac)
    if gateway not in link.addresses:
        add_address(ipr, name, gateway, exist_ok=True)
    if not link.up:
        set_link(ipr, name, up=True)
    return idx


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
    with _translated(f"create veth {host_ifname}/{peer_ifname}"):
        ipr.link("add", ifname=host_ifname, kind="veth", mtu=mtu, peer=peer)


def move_link(ipr: Any, ifname: str, netns: int) -> None:
    """Move ``ifname`` from the handle's namespace into ``netns`` (an fd)."""
    with _translated(f"move {ifname} into netns"):
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
    with _translated(f"set {ifname} {sorted(attrs)}"):
        ipr.link("set", index=_index(ipr, ifname), **attrs)


def add_address(ipr: Any, ifname: str, address: ipaddress.IPv4Interface, *,
                exist_ok: bool = False) -> None:
    """Add ``address`` (with its prefix) to ``ifname``."""
    with _translated(f"add {address} to {ifname}"):
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
    with _translated(f"add default route via {gateway} on {ifname}"):
        ipr.route("add", dst="0.0.0.0/0", gateway=str(gateway),
                  oif=_index(ipr, ifname))


def delete_link(ipr: Any, ifname: str) -> bool:
    """Delete ``ifname``; False when it was already gone (idempotent)."""
    with _translated(f"delete {ifname}"):
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
    with _translated(f"read {ifname}"):
        idx = _index(ipr, ifname)
        (msg,) = ipr.get_links(idx)
        addrs = tuple(
            ipaddress.IPv4Interface(f"{a.get_attr('IFA_ADDRESS')}/"
                                    f"{a['prefixlen']}")
            for a in ipr.get_addr(family=AF_INET, index=idx))
    return _link_from_msg(msg, addrs)


def list_links(ipr: Any, prefix: str = "") -> list[Link]:
    """Every link whose name starts with ``prefix`` (addresses not read)."""
    with _translated(f"list links {prefix}*"):
        msgs = ipr.get_links()
    links = [_link_from_msg(m, ()) for m in msgs]
    return [link for link in links if link.name.startswith(prefix)]


def routes(ipr: Any) -> list[Route]:
    """IPv4 routes of the main table."""
    out = []
    with _translated("read routes"):
        for msg in ipr.get_routes(family=AF_INET, table=254):
            dst = msg.get_attr("RTA_DST")
            gw = msg.get_attr("RTA_GATEWAY")
            out.append(Route(
                dst=(ipaddress.IPv4Network(f"{dst}/{msg['dst_len']}")
                     if dst is not None else None),
                gateway=ipaddress.IPv4Address(gw) if gw else None,
                oif=msg.get_attr("RTA_OIF")))
    return out
