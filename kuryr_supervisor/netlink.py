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

Two layers. pyroute2 handles (:func:`handle`) serve everything that reads
and decodes (CHECK, GC, the bridge's full check, the liveness probe). The
CNI hot path -- the fixed requests of a pod's ADD and DEL -- goes through
:func:`rtnl`, a raw socket with struct-packed requests (see the section at
the end for why), under the same errno-keeping errors.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno as errno_mod
import ipaddress
import os
import socket
import struct
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


# -- raw rtnetlink: the CNI hot path ----------------------------------------
#
# pyroute2 runs an asyncio loop per call and encodes and decodes every
# message in Python: about 0.5 ms of CPU (under the GIL) per request, some
# 15 ms per pod ADD. The few requests an ADD and a DEL make are fixed, so
# they are packed here with struct: one request costs a send and a recv
# that release the GIL, and requests that need no answer in between go to
# the kernel together in one datagram (each still gets its own ACK).

_NLMSG = struct.Struct("=IHHII")       # len, type, flags, seq, pid
_IFINFO = struct.Struct("=BxHiII")     # family, type, index, flags, change
_IFADDR = struct.Struct("=BBBBI")      # family, prefixlen, flags, scope, index
_RTMSG = struct.Struct("=BBBBBBBBI")   # family, dst/src len, tos, table,
#                                        protocol, scope, type, flags
_ERRNO = struct.Struct("=i")
_NLMSG_ERROR = 2
_RTM_NEWLINK, _RTM_DELLINK, _RTM_GETLINK = 16, 17, 18
_RTM_NEWADDR, _RTM_NEWROUTE = 20, 24
_F_REQUEST, _F_ACK, _F_EXCL, _F_CREATE = 0x1, 0x4, 0x200, 0x400
_IFLA_ADDRESS, _IFLA_IFNAME, _IFLA_MTU, _IFLA_MASTER = 1, 3, 4, 10
_IFLA_LINKINFO, _IFLA_NET_NS_FD, _IFLA_EXT_MASK = 18, 28, 29
_IFLA_INFO_KIND, _IFLA_INFO_DATA, _VETH_INFO_PEER = 1, 2, 1
_IFA_ADDRESS, _IFA_LOCAL = 1, 2
_RTA_OIF, _RTA_GATEWAY = 4, 5
_IFF_UP = 0x1
_RT_TABLE_MAIN, _RTPROT_STATIC, _RTN_UNICAST = 254, 4, 1
_SOL_NETLINK, _NETLINK_CAP_ACK = 270, 10
_REQUEST_TIMEOUT = 30.0     # the kernel always answers; this is a backstop
LOOPBACK_INDEX = 1
"""The kernel gives every namespace's loopback this index."""


def _attr(kind: int, payload: bytes) -> bytes:
    size = 4 + len(payload)
    return struct.pack("=HH", size, kind) + payload + b"\0" * (-size % 4)


def _name(ifname: str) -> bytes:
    return _attr(_IFLA_IFNAME, ifname.encode() + b"\0")


def _mac(mac: str) -> bytes:
    return _attr(_IFLA_ADDRESS, bytes.fromhex(mac.replace(":", "")))


def _u32(kind: int, value: int) -> bytes:
    return _attr(kind, struct.pack("=I", value))


def random_mac() -> str:
    """A random unicast, locally administered MAC (what the kernel would
    pick, but known without asking, and never rewritten by udev)."""
    raw = bytearray(os.urandom(6))
    raw[0] = (raw[0] & 0xFE) | 0x02
    return ":".join(f"{b:02x}" for b in raw)


class Rtnl:
    """A raw NETLINK_ROUTE socket for fixed requests; see :func:`rtnl`."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._seq = 0
        sock.connect((0, 0))        # the kernel: plain send() and recv()
        with contextlib.suppress(OSError):  # ACKs without the request copy
            sock.setsockopt(_SOL_NETLINK, _NETLINK_CAP_ACK, 1)

    def request(self, *msgs: tuple[int, int, bytes]) -> None:
        """Send ``(type, flags, body)`` requests in one datagram, wait for
        every ACK; OSError with the errno of the first that failed."""
        out = []
        first = self._seq + 1
        for kind, flags, body in msgs:
            self._seq += 1
            out.append(_NLMSG.pack(_NLMSG.size + len(body), kind,
                                   flags | _F_REQUEST | _F_ACK, self._seq, 0)
                       + body)
        self._sock.send(b"".join(out))
        failures: dict[int, int] = {}
        pending = set(range(first, self._seq + 1))
        while pending:
            for kind, seq, payload in self._receive():
                if kind == _NLMSG_ERROR and seq in pending:
                    pending.discard(seq)
                    (code,) = _ERRNO.unpack_from(payload)
                    if code:
                        failures[seq] = -code
        if failures:
            code = failures[min(failures)]
            raise OSError(code, os.strerror(code))

    def index(self, ifname: str) -> int | None:
        """The ifindex of ``ifname`` (one RTM_GETLINK by name), or None."""
        self._seq += 1
        body = (_IFINFO.pack(0, 0, 0, 0, 0) + _name(ifname)
                + _u32(_IFLA_EXT_MASK, 0))
        self._sock.send(_NLMSG.pack(_NLMSG.size + len(body), _RTM_GETLINK,
                                    _F_REQUEST, self._seq, 0) + body)
        while True:
            for kind, seq, payload in self._receive():
                if seq != self._seq:
                    continue
                if kind == _RTM_NEWLINK:
                    return int(_IFINFO.unpack_from(payload)[2])
                if kind == _NLMSG_ERROR:
                    (code,) = _ERRNO.unpack_from(payload)
                    if -code == errno_mod.ENODEV:
                        return None
                    raise OSError(-code, os.strerror(-code))

    def _receive(self) -> Iterator[tuple[int, int, memoryview]]:
        data = memoryview(self._sock.recv(65536))
        offset = 0
        while offset + _NLMSG.size <= len(data):
            size, kind, _, seq, _ = _NLMSG.unpack_from(data, offset)
            if size < _NLMSG.size:
                break
            yield kind, seq, data[offset + _NLMSG.size:offset + size]
            offset += (size + 3) & ~3


@contextlib.contextmanager
def rtnl(netns: int | None = None) -> Iterator[Rtnl]:
    """A raw rtnetlink socket in the host namespace or in ``netns``."""
    where = "host" if netns is None else "netns"
    with _translated(f"open netlink in {where}"):
        sock = (socket.socket(socket.AF_NETLINK, socket.SOCK_RAW,
                              NETLINK_ROUTE)
                if netns is None else _netns_socket(netns))
    try:
        sock.settimeout(_REQUEST_TIMEOUT)
        yield Rtnl(sock)
    finally:
        sock.close()


def new_veth(nl: Rtnl, host: str, peer: str, *, mtu: int, host_mac: str,
             peer_mac: str, peer_netns: int, master: int) -> None:
    """Create a veth pair in one request, names, MTU and MACs final: the
    host end up and enslaved to ``master``, the peer born (down) in
    ``peer_netns``. The peer cannot be born up: the kernel opens it before
    it has a peer (ENOTCONN); :func:`configure_pod` brings it up.

    The kernel does it all or nothing: a name taken on either side fails
    with EEXIST, a ``master`` that is gone with EINVAL (or ENODEV), and
    then neither end exists.
    """
    peer_msg = (_IFINFO.pack(0, 0, 0, 0, 0) + _name(peer)
                + _u32(_IFLA_MTU, mtu) + _mac(peer_mac)
                + _u32(_IFLA_NET_NS_FD, peer_netns))
    info = (_attr(_IFLA_INFO_KIND, b"veth\0")
            + _attr(_IFLA_INFO_DATA, _attr(_VETH_INFO_PEER, peer_msg)))
    body = (_IFINFO.pack(0, 0, 0, _IFF_UP, _IFF_UP) + _name(host)
            + _u32(_IFLA_MTU, mtu) + _mac(host_mac)
            + _u32(_IFLA_MASTER, master) + _attr(_IFLA_LINKINFO, info))
    with _translated(f"create veth {host}/{peer}"):
        nl.request((_RTM_NEWLINK, _F_CREATE | _F_EXCL, body))


def configure_pod(nl: Rtnl, index: int, address: ipaddress.IPv4Interface,
                  gateway: ipaddress.IPv4Address) -> None:
    """Link ``index`` up, its address, the default route through it and
    loopback up: one datagram, four ACKs."""
    ip = address.ip.packed
    up = _IFINFO.pack(0, 0, index, _IFF_UP, _IFF_UP)
    addr = (_IFADDR.pack(AF_INET, address.network.prefixlen, 0, 0, index)
            + _attr(_IFA_LOCAL, ip) + _attr(_IFA_ADDRESS, ip))
    route = (_RTMSG.pack(AF_INET, 0, 0, 0, _RT_TABLE_MAIN, _RTPROT_STATIC, 0,
                         _RTN_UNICAST, 0)
             + _attr(_RTA_GATEWAY, gateway.packed) + _u32(_RTA_OIF, index))
    lo_up = _IFINFO.pack(0, 0, LOOPBACK_INDEX, _IFF_UP, _IFF_UP)
    with _translated(f"set up, add {address} and default route via "
                     f"{gateway}"):
        nl.request((_RTM_NEWLINK, 0, up),
                   (_RTM_NEWADDR, _F_CREATE | _F_EXCL, addr),
                   (_RTM_NEWROUTE, _F_CREATE | _F_EXCL, route),
                   (_RTM_NEWLINK, 0, lo_up))


def pod_index(nl: Rtnl, ifname: str) -> int:
    """The ifindex of ``ifname``; NetlinkError(ENODEV) when missing."""
    with _translated(f"look up {ifname}"):
        found = nl.index(ifname)
    if found is None:
        raise NetlinkError(f"link {ifname}: {os.strerror(errno_mod.ENODEV)}",
                           errno_mod.ENODEV)
    return found


def remove_link(nl: Rtnl, ifname: str) -> bool:
    """Delete ``ifname`` by name in one request; False when already gone."""
    body = _IFINFO.pack(0, 0, 0, 0, 0) + _name(ifname)
    with _translated(f"delete {ifname}"):
        try:
            nl.request((_RTM_DELLINK, 0, body))
        except OSError as exc:
            if exc.errno == errno_mod.ENODEV:
                return False
            raise
    return True

