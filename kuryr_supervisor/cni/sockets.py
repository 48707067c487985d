"""Listening sockets for the CNI API: a root-only Unix socket, or TCP.

Invariants: the Unix socket is created 0600 (bound under a temporary name,
chmod-ed, then renamed into place, so it is never reachable with looser
permissions) inside a directory created 0700; a stale socket file (nobody
listening) is replaced, a live one is never stolen, and a file at the path
that is not a socket is never removed; every directory on the path is
root-owned and not writable by others (:func:`check_trusted`).

The master binds these sockets (or takes them from systemd) and its workers
inherit them; :class:`~kuryr_supervisor.cni.handoff.Handoff` carries a
re-created Unix socket from the master to the running Server.
"""
from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat
from collections.abc import Collection

from kuryr_supervisor.cni.handoff import Handoff, Notice

LOG = logging.getLogger(__name__)

__all__ = ["AddressInUse", "Handoff", "Notice", "UntrustedPath", "bind_tcp",
           "bind_unix", "bind_unix_file", "check_trusted", "identity",
           "is_stale", "listen", "owner_names", "parse_address", "probe_tcp"]

DEFAULT_ADDRESS = "unix:///run/kuryr-supervisor/cni.sock"
_BACKLOG = 256


class AddressInUse(Exception):
    """Another live server owns the socket path, or it is not a socket."""


def parse_address(address: str) -> tuple[str, int]:
    """``unix:///path`` -> (path, -1); ``[tcp://]host:port`` -> (host, port).

    A Unix path must be absolute: ``unix://run/x.sock`` is refused rather
    than read as ``/x.sock`` (its "host" part silently dropped).
    """
    if address.startswith("unix:"):
        path = address[len("unix:"):]
        if path.startswith("//"):
            path = path[2:]
        if not path.startswith("/") or "\0" in path:
            raise ValueError(f"unix socket path must be absolute "
                             f"(unix:///path): {address}")
        return os.path.normpath(path), -1
    host, sep, port = address.removeprefix("tcp://").rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected unix:///path or host:port, got {address}")
    return host.strip("[]") or "127.0.0.1", int(port)


class UntrustedPath(Exception):
    """A directory on the socket's path could be changed by a non-root user."""


def check_trusted(path: str, *, owners: Collection[int] = (0,)) -> None:
    """Refuse a socket path another user could swap, as sshd's StrictModes.

    Every existing directory from ``/`` to the socket's own directory (after
    symlinks) must be owned by root and not writable by group or others, or
    anyone who can write there could rename the socket away and put their
    own in its place, and the root shim would send pod requests to them and
    trust their answer. One exception, for the ancestors only: a root-owned
    sticky directory such as ``/tmp``, where others may create entries but
    cannot rename or delete ours. Directories still to be created are made
    0700 by :func:`bind_unix`.

    ``owners`` widens "root" for a path that is not the CNI socket's: a
    daemon running as a non-root uid trusts its own directories too
    (:mod:`kuryr_supervisor.master.statedir`), as sshd trusts a user's own
    home. The sticky exception stays root's alone.
    """
    directory = os.path.realpath(os.path.dirname(path))
    existing = directory
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    chain = [existing]
    while chain[-1] != "/":
        chain.append(os.path.dirname(chain[-1]))
    for current in chain:
        st = os.stat(current)
        own_dir = current == directory
        if not stat.S_ISDIR(st.st_mode):
            raise UntrustedPath(f"{current} is not a directory")
        if st.st_uid not in owners:
            raise UntrustedPath(f"{current} is owned by uid {st.st_uid}, "
                                f"not {owner_names(owners)}")
        writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        sticky = st.st_mode & stat.S_ISVTX and st.st_uid == 0
        if writable and (own_dir or not sticky):
            raise UntrustedPath(
                f"{current} is writable by group or others "
                f"(mode {stat.S_IMODE(st.st_mode):04o})")


def owner_names(owners: Collection[int]) -> str:
    """``root``, or ``root or uid N`` for a non-root daemon's own uid."""
    others = sorted(set(owners) - {0})
    return " or ".join(["root", *(f"uid {uid}" for uid in others)])


def bind_unix(path: str) -> socket.socket:
    """A listening Unix socket at ``path``, mode 0600, parent 0700 if new."""
    return bind_unix_file(path)[0]


def bind_unix_file(path: str) -> tuple[socket.socket, tuple[int, int]]:
    """:func:`bind_unix`, and the (device, inode) of the file it made,
    taken before the file is renamed into place: whoever removes it from
    the path a moment later cannot make the caller record another file's
    identity (or none) as its own."""
    check_trusted(path)
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        os.makedirs(parent, mode=0o700, exist_ok=True)
    _clear_stale(path)
    temp = f"{path}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(temp)
        os.chmod(temp, 0o600)
        sock.listen(_BACKLOG)
        st = os.stat(temp)
        os.rename(temp, path)
    except BaseException:
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    return sock, (st.st_dev, st.st_ino)


def _clear_stale(path: str) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise AddressInUse(f"{path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise AddressInUse(f"{path}: {exc.strerror}") from exc
        LOG.info("replacing stale socket %s", path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    finally:
        probe.close()
    raise AddressInUse(f"another server is listening on {path}")


def _tcp_family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def bind_tcp(host: str, port: int, *, backlog: int = _BACKLOG) -> socket.socket:
    """A listening TCP socket (SO_REUSEADDR: a restarted daemon binds at
    once past TIME_WAIT peers)."""
    sock = socket.socket(_tcp_family(host), socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def probe_tcp(host: str, port: int) -> None:
    """Raise the :class:`OSError` :func:`bind_tcp` would meet on
    ``host:port`` (``EADDRINUSE`` for a port another process holds), and
    hold nothing: the address is bound for an instant with the same
    ``SO_REUSEADDR`` and closed, never listened on.

    Why here, once: the master's preflight and ``check-config`` ask this of
    the probe listener and of a TCP CNI address beside a daemon that may be
    running, and their answer must be the start's bind's (a port whose
    last peer is in TIME_WAIT is free to all three).
    """
    with socket.socket(_tcp_family(host), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))


def listen(address: str) -> socket.socket:
    """A listening socket for a CNI ``bind_address`` (Unix path or TCP)."""
    path, port = parse_address(address)
    return bind_unix(path) if port < 0 else bind_tcp(path, port)


def identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path``; None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def is_stale(path: str) -> bool:
    """True when ``path`` is a socket file nobody listens on (or is gone)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except OSError as exc:
            return exc.errno in (errno.ECONNREFUSED, errno.ENOENT)
    return False
