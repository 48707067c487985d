"""systemd socket activation (``sd_listen_fds``), in the master only.

systemd (a ``.socket`` unit, or ``systemd-socket-activate``) passes
listening sockets as descriptors 3, 4, ... and describes them in the
environment: ``LISTEN_PID`` (the process they are meant for),
``LISTEN_FDS`` (how many) and ``LISTEN_FDNAMES`` (colon-separated names,
``FileDescriptorName=``). The variables are honoured only when
``LISTEN_PID`` is this process (a child that inherited them must not take
its parent's descriptors), and are unset once taken so no worker or
helper sees them.

:func:`peek` describes the passed sockets without taking them (the
preflight checks need to know a port or a path is ours, not another
daemon's); :func:`take` hands them over as socket objects, once.

Which passed socket is which (:func:`match`): by its name (``cni``,
``probes``, ``metrics``), else by its address; a named one on another
address than the configured one is refused, since the shims and the
kubelet follow the configuration.
"""
from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import os
import resource
import socket
from collections.abc import Collection, MutableMapping

from oslo_config import cfg

from kuryr_supervisor.cni import sockets

#: The first descriptor systemd passes (SD_LISTEN_FDS_START).
FIRST_FD = 3
#: Descriptors a process can have when RLIMIT_NOFILE is unlimited (the
#: kernel's default fs.nr_open).
_NR_OPEN = 1 << 20
_VARS = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


@dataclasses.dataclass(frozen=True)
class Passed:
    """One passed descriptor: its name and what it listens on."""

    fd: int
    name: str                         # "" when systemd gave none
    family: int
    address: str | tuple[str, int]    # a Unix path, or (host, port)
    listening: bool


def _describe(fd: int, name: str) -> Passed | None:
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return None                   # not a socket, or closed
    try:
        listening = bool(sock.getsockopt(socket.SOL_SOCKET,
                                         socket.SO_ACCEPTCONN))
        stream = sock.type == socket.SOCK_STREAM
        name_ = sock.getsockname()
        address = name_ if isinstance(name_, str) else (str(name_[0]),
                                                         int(name_[1]))
        return Passed(fd, name, sock.family, address, listening and stream)
    finally:
        sock.detach()                 # describing is not taking


def fd_limit() -> int:
    """The highest descriptor count this process may hold (RLIMIT_NOFILE's
    soft limit; the kernel's ceiling when that is unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return _NR_OPEN if soft == resource.RLIM_INFINITY else int(soft)


def peek(environ: MutableMapping[str, str] | None = None, *,
         pid: int | None = None, limit: int | None = None) -> list[Passed]:
    """The sockets systemd passed to this process (none when not ours).

    ``LISTEN_FDS`` larger than the descriptors this process can have
    (``limit``, default :func:`fd_limit`) is refused (ListenerError, exit
    78) rather than walked: ``LISTEN_FDS=999999999`` would otherwise look
    at every descriptor number for hours before the daemon starts.
    """
    env = os.environ if environ is None else environ
    try:
        if int(env.get("LISTEN_PID", "")) != (os.getpid() if pid is None
                                               else pid):
            return []
        count = int(env.get("LISTEN_FDS", ""))
    except ValueError:
        return []
    ceiling = (fd_limit() if limit is None else limit) - FIRST_FD
    if count > ceiling:
        raise ListenerError(f"LISTEN_FDS={count} is more than this process "
                            f"can hold (RLIMIT_NOFILE allows {ceiling} "
                            "passed descriptors); systemd never passes that "
                            "many: unset LISTEN_FDS and LISTEN_PID")
    names = env.get("LISTEN_FDNAMES", "").split(":")
    passed = []
    for i in range(max(0, count)):
        name = names[i] if i < len(names) and names[i] != "unknown" else ""
        described = _describe(FIRST_FD + i, name)
        if described is not None:
            passed.append(described)
    return passed


def take(environ: MutableMapping[str, str] | None = None, *,
         pid: int | None = None) -> list[tuple[Passed, socket.socket]]:
    """Take the passed sockets (once) and unset the variables."""
    env = os.environ if environ is None else environ
    passed = peek(env, pid=pid)
    for var in _VARS:
        env.pop(var, None)
    taken = []
    for item in passed:
        with contextlib.suppress(OSError):
            taken.append((item, socket.socket(fileno=item.fd)))
    return taken


CNI, PROBES, METRICS = "cni", "probes", "metrics"
#: Every listener a daemon may have; a role names those it serves
#: (:attr:`kuryr_supervisor.master.roles.base.Role.listeners`).
ALL = (CNI, PROBES, METRICS)


class ListenerError(Exception):
    """A socket cannot be bound or a passed one is refused (exit 78)."""


def _same_tcp(address: object, host: str, port: int) -> bool:
    if not isinstance(address, tuple) or address[1] != port:
        return False
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(address[0]) == ipaddress.ip_address(host)
    return str(address[0]) == host


def wanted(conf: cfg.ConfigOpts, serves: Collection[str] = ALL
           ) -> dict[str, str | tuple[str, int]]:
    """Listener name -> configured address (a Unix path or (host, port)),
    for each of ``serves`` the configuration enables (the probe listener
    is every role's; metrics only with a port)."""
    wanted: dict[str, str | tuple[str, int]] = {}
    if CNI in serves:
        path, port = sockets.parse_address(conf.cni_daemon.bind_address)
        wanted[CNI] = path if port < 0 else (path, port)
    opts = conf.cni_health_server
    wanted[PROBES] = (opts.host, opts.port)
    if METRICS in serves and conf.metrics.port:
        wanted[METRICS] = (conf.metrics.host, conf.metrics.port)
    return wanted


def _matches(address: object, want: str | tuple[str, int]) -> bool:
    if isinstance(want, str):
        return address == want
    return _same_tcp(address, *want)


def match(passed: Passed, conf: cfg.ConfigOpts,
          serves: Collection[str] = ALL) -> str | None:
    """Which of ``serves`` a passed socket is, by name, else by address."""
    roles = wanted(conf, serves)
    if passed.name in roles:
        want = roles[passed.name]
        if not _matches(passed.address, want):
            raise ListenerError(f"systemd passed socket {passed.name!r} on "
                                f"{passed.address}, but the configuration "
                                f"says {want}")
        return passed.name
    for role, want in roles.items():
        if _matches(passed.address, want):
            return role
    return None


def passed_roles(conf: cfg.ConfigOpts,
                 serves: Collection[str] = ALL) -> set[str]:
    """Listeners of ``serves`` systemd passes a socket for (without taking
    them): a port or path held by systemd for us is not another daemon's."""
    roles = set()
    for item in peek():
        with contextlib.suppress(ListenerError):
            role = match(item, conf, serves)
            if role is not None:
                roles.add(role)
    return roles
