"""What every part of the netlink adapter shares: its errors (with the errno
kept, so callers decide by errno, never by message text) and the way into a
network namespace.

Namespaces are passed as an open file descriptor (see :func:`open_netns`):
the caller opens the path given by the runtime (``/var/run/netns/x`` or
``/proc/<pid>/ns/net``) once, so every step of an operation talks to the same
namespace even if the path is unlinked meanwhile. A netlink socket belongs to
the namespace it was created in, so a throwaway thread enters the namespace
(``setns`` moves only the calling thread), creates the socket and ends.
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

AF_INET = 2
CLONE_NEWNET = 0x40000000
NETLINK_ROUTE = 0
# Failing to open a namespace path for these reasons says nothing about
# whether the namespace exists.
_NOT_GONE = frozenset({errno_mod.EACCES, errno_mod.EPERM, errno_mod.EMFILE,
                       errno_mod.ENFILE, errno_mod.ENOMEM, errno_mod.EINTR})


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



class NetlinkError(Exception):
    """A netlink operation failed; ``errno`` is kept when known."""

    def __init__(self, msg: str, errno: int | None = None) -> None:
        super().__init__(msg)
        self.errno = errno


class WrongLinkKind(NetlinkError):
    """A link of the expected name exists but is of another kind."""


class NetnsNotFound(NetlinkError):
    """The network namespace path does not exist or is no namespace."""


def errno_of(exc: BaseException) -> int | None:
    """The errno of an OS error, or of a pyroute2 NetlinkError (``code``)."""
    code = getattr(exc, "code", None)
    if isinstance(code, int) and not isinstance(exc, OSError):
        return code
    return getattr(exc, "errno", None)


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """Turn any pyroute2/OS failure inside the block into NetlinkError."""
    try:
        yield
    except NetlinkError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyroute2 raises many kinds
        code = errno_of(exc)
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


def setns(fd: int) -> None:
    if hasattr(os, "setns"):  # Python >= 3.12
        os.setns(fd, CLONE_NEWNET)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def netns_socket(netns: int) -> socket.socket:
    """A NETLINK_ROUTE socket inside ``netns``, made by a throwaway thread."""
    return netns_sockets(netns, [(socket.AF_NETLINK, socket.SOCK_DGRAM,
                                  NETLINK_ROUTE)])[0]


def netns_sockets(netns: int,
                  kinds: list[tuple[int, int, int]]) -> list[socket.socket]:
    """Sockets (family, type, proto) inside ``netns``, all made by one
    throwaway thread (setns moves only the thread that calls it)."""
    box: dict[str, Any] = {"socks": []}

    def enter_and_create() -> None:
        try:
            setns(netns)
            for family, kind, proto in kinds:
                box["socks"].append(socket.socket(family, kind, proto))
        except BaseException as exc:  # noqa: BLE001 - re-raised by caller
            box["exc"] = exc

    thread = threading.Thread(target=enter_and_create, name="netns-socket")
    thread.start()
    thread.join()
    if "exc" in box:
        for sock in box["socks"]:
            sock.close()
        raise box["exc"]
    return list(box["socks"])
