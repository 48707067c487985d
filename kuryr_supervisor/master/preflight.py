"""Checks in the master, before any worker is forked, of what workers need.

Why here: oslo.config checks a value's type, not whether the world agrees
with it. A probe host that does not resolve, a ``state_dir`` that is a
file or a socket directory another user can write make a worker fail at
start, the supervisor restart it, and so on without end. Found here, they
stop the daemon with one line naming the option and exit 78, which systemd
(``RestartPreventExitStatus=78``) and an operator both understand.

``state_dir`` is trusted only as the socket's directory is, and its lock
is taken without following or truncating anything (:mod:`.statedir`); a
daemon run as a non-root uid (the controller role) trusts its own uid's
directories besides root's. Nothing else here needs root: the default
probe and metrics ports are above 1024, and the CNI socket's checks apply
to the role that serves it. Each role adds its own checks (its object's
:meth:`~kuryr_supervisor.master.roles.base.Role.checks`: the CNI socket's
path, the handlers' entry points) and names its listeners: they are
handed in here, never the role's name.
A configuration file that holds a secret and is not private to the daemon
gets a warning line here (:mod:`kuryr_supervisor.conf.secretfiles`), and
so does each group or option of the files that nothing registers, with
the closest known name (:mod:`kuryr_supervisor.conf.unknown`: a typo would
otherwise leave its option at the default without a word), the lines
``check-config`` prints.

A second daemon on the same state directory would write into the first
one's allocations and log; it is refused with exit 77
(:attr:`~kuryr_supervisor.exitcodes.ExitCode.ALREADY_RUNNING`). The state
directory's lock (``flock`` on ``<state_dir>/daemon.lock``) is held by the
master and inherited by its workers, so it is released only when the last
process of the daemon is gone. It is taken first: a probe port or socket
path held by anything else once the lock is ours is not "already running"
but a conflict, refused with exit 78 naming the holder's pid and uid
(:mod:`.portholder`) -- a local user can bind a port first.
"""
from __future__ import annotations

import errno
import logging
import os
import socket
import stat
from collections.abc import Callable, Collection, Iterable
from typing import IO

from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.cni import sockets
from kuryr_supervisor.cni.ipam import schema
from kuryr_supervisor.conf.ipam import DB_FILE
from kuryr_supervisor.kubernetes import config as k8s_config
from kuryr_supervisor.kubernetes.wire import K8sPermanent
from kuryr_supervisor.master import listeners, portholder, statedir

LOG = logging.getLogger(__name__)
LOCK_FILE = statedir.LOCK_FILE


class PreflightError(Exception):
    """A configured value the world disagrees with (exit 78)."""


class AddressTaken(PreflightError):
    """Another process holds a port or socket path the daemon listens on
    (exit 78, naming its pid and uid where the kernel says). Not "already
    running": our own daemon would hold the state directory's lock, taken
    first; whatever holds the address now is something else."""


class AlreadyRunning(Exception):
    """Another daemon holds the state directory's lock (exit 77)."""


#: A role's own check that takes nothing (raises PreflightError).
Check = Callable[[cfg.ConfigOpts], None]


def run(conf: cfg.ConfigOpts, *, serves: Collection[str],
        checks: Iterable[Check] = ()) -> IO[str]:
    """Every check; returns the held state-directory lock (keep it open).
    ``serves``: the role's listeners (:mod:`.activation`'s names), each
    checked free unless systemd holds it for us; ``checks``: the role's
    own, run by :func:`validate`."""
    for line in conf_mod.secret_file_warnings(conf):
        LOG.warning("%s", line)
    for line in conf_mod.unknown_names(conf):
        LOG.warning("%s", line)
    validate(conf, checks)
    lock = _state_dir_lock(conf.ipam.state_dir)
    try:
        # systemd holds them for us
        passed = listeners.passed_roles(conf, serves)
    except listeners.ListenerError as exc:
        lock.close()
        raise PreflightError(str(exc)) from exc
    try:
        if listeners.PROBES not in passed:
            _probe_port_free(conf)
        if listeners.CNI in serves and listeners.CNI not in passed:
            _socket_free(conf)
    except BaseException:
        lock.close()
        raise
    return lock


def validate(conf: cfg.ConfigOpts, checks: Iterable[Check] = ()) -> None:
    """The checks that take nothing: no lock, no bind, nothing created,
    the role's ``checks`` among them. ``kuryr-supervisor check-config``
    runs them beside a running daemon."""
    _kubernetes_endpoint(conf)
    _probe_address(conf)
    for check in checks:
        check(conf)
    state_dir = conf.ipam.state_dir
    try:
        statedir.check(state_dir)
    except statedir.Untrusted as exc:
        raise PreflightError(str(exc)) from exc
    try:
        schema.check_schema(os.path.join(state_dir, DB_FILE))
    except schema.SchemaOutOfRange as exc:
        raise PreflightError(exc.msg) from exc


def _kubernetes_endpoint(conf: cfg.ConfigOpts) -> None:
    """In Kubernetes mode, the API's address and credentials resolve: a
    kubeconfig that does not parse or names a credential plugin, a service
    account that is not mounted, TLS material that does not load. (A token
    file is read per request: it may be rotated in later.)

    And every file that says which server to trust and who we are is one
    only root (or the daemon's own uid) can change: whoever can rewrite the
    kubeconfig or the CA bundle can point the daemon, which plumbs pods as
    root, at an API server of their own."""
    if not k8s_config.is_configured(conf):
        return
    try:
        endpoint = k8s_config.make_endpoint(conf)
        endpoint.ssl_context()
    except K8sPermanent as exc:
        raise PreflightError(str(exc)) from exc
    k = conf.kubernetes
    files = {"[kubernetes] kubeconfig": "" if k.api_root else k.kubeconfig,
             "the CA bundle": endpoint.ca_file,
             "the client certificate": endpoint.cert_file,
             "the client key": endpoint.key_file,
             "the token file": endpoint.token_file}
    trusted = statedir.owners()
    for what, path in files.items():
        if path and (why := _changeable(path, trusted)):
            raise PreflightError(f"{what} {path} {why}: only root (or the "
                                 "daemon's own uid) may be able to change it")


def _changeable(path: str, trusted: tuple[int, ...]) -> str:
    """Why someone other than ``trusted`` could change ``path`` (its
    target, after symbolic links, as the kubelet's rotated files are), or
    its directory; empty when nobody can. A file that is not there yet (a
    token rotated in later) is left to the request that reads it."""
    try:
        st = os.stat(path)
    except OSError:
        return ""
    if st.st_uid not in trusted:
        return f"is owned by uid {st.st_uid}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    try:
        sockets.check_trusted(os.path.realpath(path), owners=trusted)
    except sockets.UntrustedPath as exc:
        return f"is in an untrusted directory ({exc})"
    return ""


def _probe_address(conf: cfg.ConfigOpts) -> None:
    opts = conf.cni_health_server
    try:
        socket.getaddrinfo(opts.host, opts.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise PreflightError(f"[cni_health_server] host {opts.host!r} does "
                             f"not resolve: {exc}") from exc
    if opts.cg_path and not os.path.isdir(opts.cg_path):
        raise PreflightError(f"[cni_health_server] cg_path {opts.cg_path!r} "
                             "is not a directory")


def cni_socket_path(conf: cfg.ConfigOpts) -> None:
    """The CNI socket's rules, a check of the role that serves it (the CNI
    role's): the controller role binds no CNI socket, so its
    ``bind_address`` is neither checked nor probed."""
    address = conf.cni_daemon.bind_address
    try:
        path, port = sockets.parse_address(address)
    except ValueError as exc:
        raise PreflightError(f"[cni_daemon] bind_address: {exc}") from exc
    if port >= 0:
        return
    try:
        sockets.check_trusted(path)
    except sockets.UntrustedPath as exc:
        raise PreflightError(f"[cni_daemon] bind_address {address}: {exc}; "
                             "refusing a socket another user could "
                             "replace") from exc
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise PreflightError(f"[cni_daemon] bind_address {address}: {path} "
                             "exists and is not a socket")


def _state_dir_lock(state_dir: str) -> IO[str]:
    try:
        return statedir.lock(state_dir)
    except statedir.Untrusted as exc:
        raise PreflightError(str(exc)) from exc
    except statedir.Busy as exc:
        raise AlreadyRunning(str(exc)) from exc


def _probe_port_free(conf: cfg.ConfigOpts) -> None:
    opts = conf.cni_health_server
    where = f"{opts.host}:{opts.port}"
    _tcp_free(opts.host, opts.port,
              taken=f"[cni_health_server] port: {where}",
              refused=f"[cni_health_server] host/port {where}")


def _tcp_free(host: str, port: int, *, taken: str, refused: str) -> None:
    """A port held by another process is :class:`AddressTaken`, named with
    its holder; any other refusal of the bind is the configuration's."""
    try:
        sockets.probe_tcp(host, port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise AddressTaken(
                f"{taken} is {portholder.describe_tcp(port)}") from exc
        raise PreflightError(f"{refused}: {exc.strerror}") from exc


def _socket_free(conf: cfg.ConfigOpts) -> None:
    address = conf.cni_daemon.bind_address
    path, port = sockets.parse_address(address)
    if port >= 0:
        what = f"[cni_daemon] bind_address {address}"
        _tcp_free(path, port, taken=what, refused=what)
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except OSError:
            return                  # absent or stale: the Server replaces it
    raise AddressTaken(f"[cni_daemon] bind_address {address}: another "
                       "server is listening there, "
                       f"{portholder.describe_unix(path)}")
