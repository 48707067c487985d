"""What the daemon's start would refuse beyond
:func:`~kuryr_supervisor.master.preflight.validate`, found without taking it.

A start creates the state directory, takes its lock, binds the probe
listener and the CNI socket; any of them failing is exit 78. ``check-config``
must say so too, yet create, lock and listen on nothing (a daemon may be
running on that very configuration). So, for each:

* ``[ipam] state_dir``: the nearest existing ancestor (the directory itself
  when it exists) is a directory, writable, on a filesystem mounted
  read-write, and neither in /proc nor in /sys (kernel filesystems, where
  nothing can be created); ``daemon.lock``, if there, is a plain file of
  the daemon's uid with one link (what :mod:`..master.statedir` opens);
* the probe listener: its address can be bound (bound for an instant with
  ``SO_REUSEADDR``, never listened on); a port in use is a start's
  question (exit 77), not the configuration's;
* the CNI socket, for a role that serves it (its listeners are handed
  in): the path fits ``sun_path`` with the
  temporary name the daemon binds first, and its directory can be made
  or written as the state directory's.

Each failure is one line naming the option, as the daemon's.
"""
from __future__ import annotations

import errno
import os
import stat
from collections.abc import Collection

from oslo_config import cfg

from kuryr_supervisor.cni import sockets
from kuryr_supervisor.master import statedir
from kuryr_supervisor.master.activation import ALL, CNI

KERNEL_FS = ("/proc", "/sys")
#: sun_path holds 108 bytes with its NUL; the daemon binds
#: ``<path>.<pid>.tmp`` first (pid up to 7 digits) and renames it.
_SUN_PATH = 107
_TEMP_SUFFIX = len(".4194304.tmp")


class Refused(Exception):
    """The daemon would refuse to start (exit 78)."""


def _existing_ancestor(path: str) -> str:
    current = os.path.abspath(path)
    while not os.path.lexists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def _kernel_fs(path: str) -> str | None:
    real = os.path.realpath(path)
    try:
        dev = os.stat(real).st_dev
    except OSError:
        dev = None
    for top in KERNEL_FS:
        if real == top or real.startswith(top + "/"):
            return top
        try:
            if dev is not None and os.path.ismount(top) \
                    and os.stat(top).st_dev == dev:
                return top
        except OSError:
            continue
    return None


def writable_place(what: str, path: str) -> None:
    """``path`` exists as a directory the daemon can write in, or can be
    created: checked on its nearest existing ancestor, nothing created."""
    existing = _existing_ancestor(path)
    top = _kernel_fs(existing)
    if top is not None:
        raise Refused(f"{what} {path} is in {top}, a kernel filesystem "
                      "where nothing can be created")
    if not os.path.isdir(existing):
        raise Refused(f"{what} {path}: {existing} is not a directory")
    verb = "write in" if existing == os.path.abspath(path) else "create it in"
    if os.statvfs(existing).f_flag & os.ST_RDONLY:
        raise Refused(f"{what} {path}: cannot {verb} {existing}: read-only "
                      "file system")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise Refused(f"{what} {path}: cannot {verb} {existing}: "
                      "permission denied")


def state_dir(conf: cfg.ConfigOpts) -> None:
    path = conf.ipam.state_dir
    writable_place("[ipam] state_dir", path)
    lock = os.path.join(path, statedir.LOCK_FILE)
    try:
        st = os.lstat(lock)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() \
            or st.st_nlink != 1:
        raise Refused(f"[ipam] state_dir {path}: {lock} is not a plain file "
                      f"of ours (owner uid {st.st_uid}, {st.st_nlink} "
                      "links); remove it")


def probe_listener(conf: cfg.ConfigOpts) -> None:
    opts = conf.cni_health_server
    _tcp("[cni_health_server] host/port", opts.host, opts.port)


def _tcp(what: str, host: str, port: int) -> None:
    try:
        sockets.probe_tcp(host, port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return                  # in use: a start's question (77)
        raise Refused(f"{what} {host}:{port}: {exc.strerror}") from exc


def cni_socket(conf: cfg.ConfigOpts) -> None:
    address = conf.cni_daemon.bind_address
    path, port = sockets.parse_address(address)
    what = f"[cni_daemon] bind_address {address}"
    if port >= 0:
        _tcp("[cni_daemon] bind_address", path, port)
        return
    size = len(os.fsencode(path))
    if size + _TEMP_SUFFIX > _SUN_PATH:
        raise Refused(f"{what}: the path is {size} bytes, too long for a "
                      f"Unix socket (at most {_SUN_PATH - _TEMP_SUFFIX})")
    writable_place(what, os.path.dirname(path))


def run(conf: cfg.ConfigOpts, serves: Collection[str] = ALL) -> None:
    """Every check above, or the first refusal; ``serves``: the role's
    listeners (the controller's has no CNI socket)."""
    state_dir(conf)
    probe_listener(conf)
    if CNI in serves:
        cni_socket(conf)
