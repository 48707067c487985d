"""Transmit checksum offload, switched through the ethtool ioctl.

Open vSwitch's userspace datapath (``datapath_type=netdev``) forwards a
veth's packets as they come: a TCP segment whose checksum the sender left
to "the hardware" (``CHECKSUM_PARTIAL``) arrives at the other pod with a
wrong checksum and is dropped, so TCP between pods fails while ICMP works.
Switching ``tx-checksumming`` off on the pod's interface makes its kernel
finish every checksum itself.

Done with ``SIOCETHTOOL``/``ETHTOOL_STXCSUM`` on a socket made inside the
pod's namespace, not with the ``ethtool`` binary: no fork per ADD and
nothing more to install. ADD uses the rtnetlink socket it configures the
pod with (the kernel hands a device ioctl that a socket's family does not
know to the devices of the socket's namespace); on its own a datagram
socket is made there, by a throwaway thread as netlink sockets are.
"""
from __future__ import annotations

import ctypes
import fcntl
import socket
import struct

from kuryr_supervisor.cni.netlink.base import NetlinkError, errno_of, netns_sockets

SIOCETHTOOL = 0x8946
ETHTOOL_GTXCSUM = 0x16
ETHTOOL_STXCSUM = 0x17


def _inet_socket(netns: int | None) -> socket.socket:
    if netns is None:
        return socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    [sock] = netns_sockets(netns, [(socket.AF_INET, socket.SOCK_DGRAM, 0)])
    return sock


def _ethtool(sock: socket.socket, ifname: str, cmd: int, data: int) -> int:
    """One ethtool_value command on ``ifname``; the value it returns."""
    value = ctypes.create_string_buffer(struct.pack("=II", cmd, data))
    ifreq = struct.pack("16sP", ifname.encode(), ctypes.addressof(value))
    ifreq += b"\0" * (40 - len(ifreq))
    fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)
    return int(struct.unpack("=II", value.raw[:8])[1])


def tx_checksum(ifname: str, netns: int | None = None, *,
                enable: bool | None = None,
                sock: socket.socket | None = None) -> bool:
    """Whether transmit checksum offload is on for ``ifname`` (in
    ``netns``, an open namespace fd, or where ``sock`` was made: any socket
    there does, ``rtnl(netns).socket`` included), after setting it to
    ``enable`` when given."""
    try:
        own = sock is None
        used = _inet_socket(netns) if sock is None else sock
        try:
            if enable is not None:
                _ethtool(used, ifname, ETHTOOL_STXCSUM, int(enable))
            return bool(_ethtool(used, ifname, ETHTOOL_GTXCSUM, 0))
        finally:
            if own:
                used.close()
    except OSError as exc:
        raise NetlinkError(f"ethtool tx-checksumming on {ifname}: {exc}",
                           errno_of(exc)) from exc
