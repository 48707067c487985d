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
  (:class:`~kuryr_supervisor.cni.sockets.Handoff`, which says why);
- on a normal stop the sockets are closed last, after the workers, and the
  socket file is left in place: a stale file is replaced by the next
  daemon's bind, a passed one belongs to systemd, and a file removed at
  stop would make clients that retry see ENOENT instead of waiting.
"""
from __future__ import annotations

import dataclasses
import errno
import logging
import os
import socket
import stat
import sys

from oslo_config import cfg

from kuryr_supervisor.cni import sockets
from kuryr_supervisor.exitcodes import ExitCode
from kuryr_supervisor.health import httpserver
from kuryr_supervisor.master import activation
from kuryr_supervisor.master.activation import (
    CNI,
    METRICS,
    PROBES,
    ListenerError,
    match,
    passed_roles,
    wanted,
)

LOG = logging.getLogger(__name__)

__all__ = ["CNI", "METRICS", "PROBES", "ListenerError", "Listeners",
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
    _lost: bool = False

    def close(self) -> None:
        """Close every listening socket (after the workers are gone)."""
        for sock in (self.cni, self.probe, self.metrics):
            if sock is not None:
                sock.close()
        if self.handoff is not None:
            self.handoff.close()

    # -- the CNI socket file ----------------------------------------------------
    def watch(self) -> bool:
        """Notice the CNI socket file deleted or replaced and re-create it.

        Returns True when the file at the path is ours. While it is not,
        the Server is told once (it raises ``Fault.SOCKET``) and a bind is
        tried each call: a file that is not a socket, or a live socket of
        someone else, is never removed (:func:`sockets.bind_unix`).
        """
        path = self.cni_path
        if path is None or sockets.identity(path) == self._inode:
            return True
        if not self._lost:
            LOG.error("CNI socket %s was deleted or replaced; binding it "
                      "again", path)
            self._lost = True
            if self.handoff is not None:
                self.handoff.lost()
        try:
            self._rebind(path)
        except (OSError, sockets.AddressInUse, sockets.UntrustedPath) as exc:
            LOG.debug("cannot bind %s again yet: %s", path, exc)
            return False
        self._lost = False
        LOG.warning("CNI socket %s bound again", path)
        return True

    def _rebind(self, path: str) -> None:
        assert self.cni is not None
        with sockets.bind_unix(path) as fresh:
            os.dup2(fresh.fileno(), self.cni.fileno(), inheritable=False)
        self._inode = sockets.identity(path)
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


def open_all(conf: cfg.ConfigOpts) -> Listeners:
    """Bind (or take from systemd) every listener the role serves."""
    taken: dict[str, socket.socket] = {}
    for item, sock in activation.take():
        role = match(item, conf) if item.listening else None
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
        for role in wanted(conf):
            if role in taken:
                continue
            try:
                made[role] = _bind(role, conf)
            except sockets.UntrustedPath as exc:
                raise ListenerError(f"{role} listener: {exc}") from exc
            except (sockets.AddressInUse, OSError) as exc:
                if role != METRICS:
                    in_use = isinstance(exc, sockets.AddressInUse) or \
                        exc.errno == errno.EADDRINUSE
                    raise ListenerError(f"{role} listener: {exc}",
                                        in_use=in_use) from exc
                # Metrics are not health: the probes stay up.
                LOG.error("metrics listener %s:%d cannot bind (%s); /metrics "
                          "stays on the probe port", conf.metrics.host,
                          conf.metrics.port, exc)
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


def open_or_exit(conf: cfg.ConfigOpts) -> Listeners:
    """:func:`open_all`, or one line on stderr and exit 77 (in use) or 78."""
    try:
        return open_all(conf)
    except ListenerError as exc:
        what = "already running" if exc.in_use else "configuration error"
        print(f"kuryr-supervisor: {what}: {exc}", file=sys.stderr)
        raise SystemExit(ExitCode.ALREADY_RUNNING if exc.in_use
                         else ExitCode.CONFIG) from None
