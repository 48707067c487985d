"""Every listening socket of the daemon, owned by the master.

The CNI socket, the probe listener and the metrics listener are bound (or
taken from systemd socket activation, :mod:`.activation`) by the master
before it forks; each serving worker inherits its socket and never binds.
Why: the process that outlives the workers holds the sockets, so a worker
that dies or is replaced leaves new connections waiting in the kernel's
backlog for its successor -- a runtime or kubelet sees latency, never
``connection refused``.

Invariants:

- the CNI Unix socket keeps today's trust rules
  (:mod:`kuryr_supervisor.cni.sockets`: 0600, a 0700 directory, root-owned
  ancestors); a socket passed by systemd is held to the same rules (its
  file root's, 0600, its directory trusted) or the daemon exits 78;
- a passed socket is matched by its name or else by its address
  (:func:`~kuryr_supervisor.master.activation.match`); a named one on
  another address is refused (exit 78); an unmatched one is closed;
- the socket file deleted or replaced under the daemon is noticed by the
  master (:meth:`Listeners.watch`, each governor tick), re-created at the
  same path, ``dup2``-ed onto the master's own descriptor (so workers forked
  later inherit it) and handed to the running Server
  (:class:`~kuryr_supervisor.cni.handoff.Handoff`, which says why);
- on a normal stop the sockets are closed last, after the workers, and the
  socket file is left in place: a stale file is replaced by the next
  daemon's bind, a passed one belongs to systemd, and a file removed at
  stop would make clients that retry see ENOENT instead of waiting.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import os
import socket
import stat
import sys
from collections.abc import Collection

from oslo_config import cfg

from kuryr_supervisor.cni import sockets
from kuryr_supervisor.exitcodes import ExitCode
from kuryr_supervisor.health import httpserver
from kuryr_supervisor.master import activation, portholder
from kuryr_supervisor.master.activation import (
    ALL,
    CNI,
    METRICS,
    PROBES,
    ListenerError,
    match,
    passed_roles,
    wanted,
)
from kuryr_supervisor.state import Fault

LOG = logging.getLogger(__name__)

__all__ = ["ALL", "CNI", "METRICS", "PROBES", "ListenerError", "Listeners",
           "match", "open_all", "open_or_exit", "passed_roles"]


def _check_passed_unix(path: str) -> None:
    """A passed CNI socket file must satisfy today's trust rules."""
    try:
        sockets.check_trusted(path)
        st = os.lstat(path)
    except sockets.UntrustedPath as exc:
        raise ListenerError(f"systemd socket {path}: {exc}") from exc
    except FileNotFoundError:
        return                        # re-created by Listeners.adopt_path
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != 0 \
            or stat.S_IMODE(st.st_mode) & 0o077:
        raise ListenerError(f"systemd socket {path} must be a root-owned "
                            f"socket with mode 0600 (SocketMode=0600), is "
                            f"{stat.S_IMODE(st.st_mode):04o} uid {st.st_uid}")


@dataclasses.dataclass
class Listeners:
    """The master's listening sockets, inherited by the workers."""

    probe: socket.socket
    cni: socket.socket | None = None
    metrics: socket.socket | None = None
    cni_path: str | None = None
    handoff: sockets.Handoff | None = None
    activated: tuple[str, ...] = ()
    _inode: tuple[int, int] | None = None
    _problem: Fault = Fault.NONE

    def close(self) -> None:
        """Close every listening socket (after the workers are gone)."""
        for sock in (self.cni, self.probe, self.metrics):
            if sock is not None:
                sock.close()
        if self.handoff is not None:
            self.handoff.close()

    # -- the CNI socket file ----------------------------------------------------
    def watch(self) -> bool:
        """Converge the CNI socket's path back to a socket of ours.

        Returns True when the file at the path is ours and its directory
        trusted. Each call (every governor tick), whatever happened to the
        directory (moved away, replaced, moved back, permissions changed):

        - a directory another user could change (:func:`sockets.check_trusted`)
          is a fault named to the Server (``Fault.SOCKET_UNTRUSTED``); the
          master binds nothing there until it is trusted again;
        - our own socket file back at the path (same inode: a bound socket
          keeps its inode, so it cannot be another file's) clears the fault;
        - anything else at the path is bound again: a file that is not a
          socket, or a live socket of someone else, is never removed
          (``Fault.SOCKET_BLOCKED`` until it is gone).

        Each change of fault is logged once and told to the Server, the
        writer of the fault bits.
        """
        path = self.cni_path
        if path is None:
            return True
        try:
            sockets.check_trusted(path)
        except (sockets.UntrustedPath, OSError) as exc:
            self._fault(Fault.SOCKET_UNTRUSTED, f"CNI socket {path}: {exc}; "
                        "not binding there until it is root's alone")
            return False
        current = sockets.identity(path)
        if current is not None and current == self._inode:
            self._fault(Fault.NONE, f"CNI socket {path} is ours again")
            return True
        if self._problem not in (Fault.SOCKET, Fault.SOCKET_BLOCKED):
            self._fault(Fault.SOCKET, f"CNI socket {path} was deleted or "
                        "replaced; binding it again")
        try:
            self._rebind(path)
        except sockets.AddressInUse as exc:
            self._fault(Fault.SOCKET_BLOCKED, f"CNI socket {path} cannot be "
                        f"bound again: {exc}; remove what holds the path")
            return False
        except (OSError, sockets.UntrustedPath) as exc:
            LOG.debug("cannot bind %s again yet: %s", path, exc)
            return False
        self._problem = Fault.NONE
        LOG.warning("CNI socket %s bound again", path)
        return True

    def _fault(self, fault: Fault, message: str) -> None:
        """Log and tell the Server a change of the socket's fault, once."""
        if fault == self._problem:
            return
        self._problem = fault
        if fault:
            LOG.error("%s", message)
        else:
            LOG.warning("%s", message)
        if self.handoff is not None:
            if fault:
                self.handoff.lost(fault)
            else:
                self.handoff.found()

    def _rebind(self, path: str) -> None:
        """Bind a fresh socket at ``path`` onto the master's descriptor and
        hand it to the Server. The old socket is shut down first (after the
        new one is in place): the workers forked before hold copies of it,
        and a file of it put back at the path (a directory moved back) must
        refuse connections -- stale, so it is replaced -- instead of queueing
        them where nobody accepts. What is already queued stays acceptable:
        the Server takes it before swapping."""
        assert self.cni is not None
        fresh, inode = sockets.bind_unix_file(path)
        with fresh:
            with contextlib.suppress(OSError):
                self.cni.shutdown(socket.SHUT_RD)
            os.dup2(fresh.fileno(), self.cni.fileno(), inheritable=False)
        self._inode = inode
        if self.handoff is not None:
            self.handoff.replaced(self.cni)

    def adopt_path(self, path: str, *, passed: bool) -> None:
        """Start watching ``path``; a ``passed`` socket whose file is missing
        or stale (nobody listens there) is bound again at once."""
        self.cni_path = path
        self.handoff = sockets.Handoff()
        if passed and sockets.is_stale(path):
            LOG.warning("CNI socket file %s is missing or stale; binding it "
                        "again", path)
            self._rebind(path)
        else:
            self._inode = sockets.identity(path)


def _bind(role: str, conf: cfg.ConfigOpts) -> socket.socket:
    if role == CNI:
        return sockets.listen(conf.cni_daemon.bind_address)
    opts = conf.cni_health_server if role == PROBES else conf.metrics
    return httpserver.listen(opts.host, opts.port)


def _holder(role: str, conf: cfg.ConfigOpts, exc: Exception,
            serves: Collection[str]) -> str:
    """``; held by pid N (comm), uid U`` for an address in use, else "".
    The state directory's lock is ours (taken first): whatever holds the
    address is not this daemon, so it is named, never "already running"."""
    if isinstance(exc, OSError) and exc.errno != errno.EADDRINUSE:
        return ""
    address = wanted(conf, serves)[role]
    if isinstance(address, str):
        return f"; {portholder.describe_unix(address)}"
    return f"; {portholder.describe_tcp(address[1])}"


def open_all(conf: cfg.ConfigOpts, serves: Collection[str] = ALL
             ) -> Listeners:
    """Bind (or take from systemd) every listener of ``serves`` (the
    role's: :attr:`~kuryr_supervisor.master.roles.base.Role.listeners`)."""
    taken: dict[str, socket.socket] = {}
    for item, sock in activation.take():
        role = match(item, conf, serves) if item.listening else None
        if role is None or role in taken:
            LOG.warning("ignoring socket %s passed by systemd (fd %d, name "
                        "%r)", item.address, item.fd, item.name)
            sock.close()
            continue
        if item.family == socket.AF_UNIX:
            _check_passed_unix(str(item.address))
        taken[role] = sock
        LOG.info("%s socket %s taken from systemd", role, item.address)
    made: dict[str, socket.socket] = {}
    try:
        for role in wanted(conf, serves):
            if role in taken:
                continue
            try:
                made[role] = _bind(role, conf)
            except sockets.UntrustedPath as exc:
                raise ListenerError(f"{role} listener: {exc}") from exc
            except (sockets.AddressInUse, OSError) as exc:
                if role != METRICS:
                    raise ListenerError(f"{role} listener: {exc}"
                                        f"{_holder(role, conf, exc, serves)}"
                                        ) from exc
                # Metrics are not health: the probes stay up.
                LOG.error("metrics listener %s:%d cannot bind (%s%s); "
                          "/metrics stays on the probe port", conf.metrics.host,
                          conf.metrics.port, exc,
                          _holder(role, conf, exc, serves))
    except BaseException:
        for sock in [*made.values(), *taken.values()]:
            sock.close()
        raise
    got = {**made, **taken}
    listeners = Listeners(probe=got[PROBES], cni=got.get(CNI),
                          metrics=got.get(METRICS), activated=tuple(taken))
    if listeners.cni is not None and listeners.cni.family == socket.AF_UNIX:
        path, _ = sockets.parse_address(conf.cni_daemon.bind_address)
        try:
            listeners.adopt_path(path, passed=CNI in taken)
        except (OSError, sockets.AddressInUse, sockets.UntrustedPath) as exc:
            listeners.close()
            raise ListenerError(f"systemd socket {path}: {exc}") from exc
    return listeners


def open_or_exit(conf: cfg.ConfigOpts, serves: Collection[str] = ALL
                 ) -> Listeners:
    """:func:`open_all`, or one line on stderr and exit 78 (an address
    in use names its holder: the state directory's lock, taken before,
    is ours, so it is not a second daemon of this node)."""
    try:
        return open_all(conf, serves)
    except ListenerError as exc:
        print(f"kuryr-supervisor: cannot listen: {exc}", file=sys.stderr)
        raise SystemExit(ExitCode.CONFIG) from None
