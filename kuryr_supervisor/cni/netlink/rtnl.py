"""The raw rtnetlink half of the netlink adapter: the CNI hot path.

pyroute2 runs an asyncio loop per call and encodes and decodes every message
in Python: about 0.5 ms of CPU (under the GIL) per request, some 15 ms per
pod ADD. The few requests an ADD and a DEL make are fixed, so they are packed
here with struct: one request costs a send and a recv that release the GIL,
and requests that need no answer in between go to the kernel together in one
datagram (each still gets its own ACK). Failures keep their errno, as in the
rest of the adapter.
"""
from __future__ import annotations

import contextlib
import errno as errno_mod
import ipaddress
import os
import socket
import struct
from collections.abc import Iterator

from kuryr_supervisor.cni.netlink.base import (
    AF_INET,
    NETLINK_ROUTE,
    NetlinkError,
    netns_sockets,
    translated,
)

_NLMSG = struct.Struct("=IHHII")       # len, type, flags, seq, pid
IFINFO = struct.Struct("=BxHiII")     # family, type, index, flags, change
IFADDR = struct.Struct("=BBBBI")      # family, prefixlen, flags, scope, index
_RTMSG = struct.Struct("=BBBBBBBBI")   # family, dst/src len, tos, table,
#                                        protocol, scope, type, flags
_ERRNO = struct.Struct("=i")
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
RTM_NEWLINK, _RTM_DELLINK, _RTM_GETLINK = 16, 17, 18
RTM_NEWADDR, _RTM_NEWROUTE = 20, 24
_F_REQUEST, _F_ACK, _F_DUMP = 0x1, 0x4, 0x300
F_EXCL, F_CREATE = 0x200, 0x400
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_MASTER = 1, 3, 4, 10
IFLA_LINKINFO, _IFLA_NET_NS_FD, _IFLA_EXT_MASK = 18, 28, 29
IFLA_INFO_KIND, _IFLA_INFO_DATA, _VETH_INFO_PEER = 1, 2, 1
IFA_ADDRESS, IFA_LOCAL = 1, 2
_RTA_OIF, _RTA_GATEWAY = 4, 5
IFF_UP = 0x1
_RT_TABLE_MAIN, _RTPROT_STATIC, _RTN_UNICAST = 254, 4, 1
_SOL_NETLINK, _NETLINK_CAP_ACK = 270, 10
_REQUEST_TIMEOUT = 30.0     # the kernel always answers; this is a backstop
LOOPBACK_INDEX = 1
"""The kernel gives every namespace's loopback this index."""


def nlattr(kind: int, payload: bytes) -> bytes:
    size = 4 + len(payload)
    return struct.pack("=HH", size, kind) + payload + b"\0" * (-size % 4)


def ifname_attr(ifname: str) -> bytes:
    return nlattr(IFLA_IFNAME, ifname.encode() + b"\0")


def mac_attr(mac: str) -> bytes:
    return nlattr(IFLA_ADDRESS, bytes.fromhex(mac.replace(":", "")))


def u32_attr(kind: int, value: int) -> bytes:
    return nlattr(kind, struct.pack("=I", value))


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

    @property
    def socket(self) -> socket.socket:
        """The socket itself, for a device ioctl (ethtool) in its namespace:
        the kernel hands an ioctl that netlink does not know to the device
        named, in the namespace the socket was made in, so no AF_INET
        socket has to be made there for it."""
        return self._sock

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
        payload = self.get_link(ifname)
        return None if payload is None else int(IFINFO.unpack_from(payload)[2])

    def get_link(self, ifname: str) -> memoryview | None:
        """The RTM_NEWLINK payload describing ``ifname``, None if missing."""
        self._seq += 1
        body = (IFINFO.pack(0, 0, 0, 0, 0) + ifname_attr(ifname)
                + u32_attr(_IFLA_EXT_MASK, 0))
        self._sock.send(_NLMSG.pack(_NLMSG.size + len(body), _RTM_GETLINK,
                                    _F_REQUEST, self._seq, 0) + body)
        while True:
            for kind, seq, payload in self._receive():
                if seq != self._seq:
                    continue
                if kind == RTM_NEWLINK:
                    return payload
                if kind == _NLMSG_ERROR:
                    (code,) = _ERRNO.unpack_from(payload)
                    if -code == errno_mod.ENODEV:
                        return None
                    raise OSError(-code, os.strerror(-code))

    def dump(self, kind: int, body: bytes) -> list[memoryview]:
        """Every payload of an NLM_F_DUMP request, until NLMSG_DONE."""
        self._seq += 1
        self._sock.send(_NLMSG.pack(_NLMSG.size + len(body), kind,
                                    _F_REQUEST | _F_DUMP, self._seq, 0) + body)
        out: list[memoryview] = []
        while True:
            for answer, seq, payload in self._receive():
                if seq != self._seq:
                    continue
                if answer == _NLMSG_DONE:
                    return out
                if answer == _NLMSG_ERROR:
                    (code,) = _ERRNO.unpack_from(payload)
                    if code:
                        raise OSError(-code, os.strerror(-code))
                    return out
                out.append(payload)

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
    with translated(f"open netlink in {where}"):
        if netns is None:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW,
                                 NETLINK_ROUTE)
        else:
            [sock] = netns_sockets(netns, [
                (socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_ROUTE)])
    try:
        sock.settimeout(_REQUEST_TIMEOUT)
        yield Rtnl(sock)
    finally:
        sock.close()


def new_veth(nl: Rtnl, host: str, peer: str, *, mtu: int, host_mac: str,
             peer_mac: str, peer_netns: int, master: int | None) -> None:
    """Create a veth pair in one request, names, MTU and MACs final: the
    host end up and enslaved to ``master`` (None: no master, e.g. a port
    Open vSwitch will take), the peer born (down) in ``peer_netns``. The peer cannot be born up: the kernel opens it before
    it has a peer (ENOTCONN); :func:`configure_pod` brings it up.

    The kernel does it all or nothing: a name taken on either side fails
    with EEXIST, a ``master`` that is gone with EINVAL (or ENODEV), and
    then neither end exists.
    """
    peer_msg = (IFINFO.pack(0, 0, 0, 0, 0) + ifname_attr(peer)
                + u32_attr(IFLA_MTU, mtu) + mac_attr(peer_mac)
                + u32_attr(_IFLA_NET_NS_FD, peer_netns))
    info = (nlattr(IFLA_INFO_KIND, b"veth\0")
            + nlattr(_IFLA_INFO_DATA, nlattr(_VETH_INFO_PEER, peer_msg)))
    body = (IFINFO.pack(0, 0, 0, IFF_UP, IFF_UP) + ifname_attr(host)
            + u32_attr(IFLA_MTU, mtu) + mac_attr(host_mac)
            + (u32_attr(IFLA_MASTER, master) if master is not None else b"")
            + nlattr(IFLA_LINKINFO, info))
    with translated(f"create veth {host}/{peer}"):
        nl.request((RTM_NEWLINK, F_CREATE | F_EXCL, body))


def configure_pod(nl: Rtnl, index: int, address: ipaddress.IPv4Interface,
                  gateway: ipaddress.IPv4Address) -> None:
    """Link ``index`` up, its address, the default route through it and
    loopback up: one datagram, four ACKs."""
    ip = address.ip.packed
    up = IFINFO.pack(0, 0, index, IFF_UP, IFF_UP)
    addr = (IFADDR.pack(AF_INET, address.network.prefixlen, 0, 0, index)
            + nlattr(IFA_LOCAL, ip) + nlattr(IFA_ADDRESS, ip))
    route = (_RTMSG.pack(AF_INET, 0, 0, 0, _RT_TABLE_MAIN, _RTPROT_STATIC, 0,
                         _RTN_UNICAST, 0)
             + nlattr(_RTA_GATEWAY, gateway.packed) + u32_attr(_RTA_OIF, index))
    lo_up = IFINFO.pack(0, 0, LOOPBACK_INDEX, IFF_UP, IFF_UP)
    with translated(f"set up, add {address} and default route via "
                     f"{gateway}"):
        nl.request((RTM_NEWLINK, 0, up),
                   (RTM_NEWADDR, F_CREATE | F_EXCL, addr),
                   (_RTM_NEWROUTE, F_CREATE | F_EXCL, route),
                   (RTM_NEWLINK, 0, lo_up))


def pod_index(nl: Rtnl, ifname: str) -> int:
    """The ifindex of ``ifname``; NetlinkError(ENODEV) when missing."""
    with translated(f"look up {ifname}"):
        found = nl.index(ifname)
    if found is None:
        raise NetlinkError(f"link {ifname}: {os.strerror(errno_mod.ENODEV)}",
                           errno_mod.ENODEV)
    return found


def remove_link(nl: Rtnl, ifname: str) -> bool:
    """Delete ``ifname`` by name in one request; False when already gone."""
    body = IFINFO.pack(0, 0, 0, 0, 0) + ifname_attr(ifname)
    with translated(f"delete {ifname}"):
        try:
            nl.request((_RTM_DELLINK, 0, body))
        except OSError as exc:
            if exc.errno == errno_mod.ENODEV:
                return False
            raise
    return True

