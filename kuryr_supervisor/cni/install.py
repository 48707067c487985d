"""Install the kuryr-cni shim and the conflist on the host, once ready.

The master calls :func:`install_on_first_ready` when the daemon first
becomes ready (``[cni_install] enabled``, i.e. in the DaemonSet). Order is
the point: the kubelet declares a node's network ready as soon as a
conflist appears in ``conf_dir``, so the shim goes in first and the
conflist last, and neither before the daemon can serve them.

Invariants: both files are written to a temporary name in the target
directory and renamed into place, so the runtime never reads half a file
and an executing old shim is never overwritten in place (no ETXTBSY); an
identical file is left untouched. A file at either path that another CNI
wrote (no marker of ours, :mod:`.ownership`) is neither overwritten nor
removed, unless ``[cni_install] force``; the ``cni-install`` readiness check
names it, so the daemon does not become ready over it. Uninstall removes
only the files this run installed, and only while they still carry our
marker.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Sequence

from oslo_config import cfg

from kuryr_supervisor.cni import ownership, protocol, shimbuild

LOG = logging.getLogger(__name__)

SHIM_NAME = ownership.SHIM_NAME
DEFAULT_INTERPRETER = "/usr/bin/env python3"
SHIM_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "shim.py")
#: Where ``cmd/kuryr-cni/build.sh`` puts the compiled shim (package data, so
#: ``pip install .`` after a build carries it). Installed when present: it
#: needs no python3 on the host and starts in a millisecond.
COMPILED_SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "bin", SHIM_NAME)


def atomic_write(path: str, data: bytes, mode: int) -> bool:
    """Write ``data`` to ``path`` via temp + rename; False if unchanged."""
    try:
        with open(path, "rb") as f:
            if f.read() == data and os.stat(path).st_mode & 0o7777 == mode:
                return False
    except FileNotFoundError:
        pass
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.",
                               dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return True


def shim_script(source: str = SHIM_SOURCE,
                interpreter: str = DEFAULT_INTERPRETER) -> bytes:
    """The shim, as one file with the shebang the runtime will exec: a
    loader carrying the module precompiled and its source
    (:mod:`.shimbuild`)."""
    with open(source, encoding="utf-8") as f:
        text = f.read()
    if text.startswith("#!"):   # ours replaces it; shim.py's lines hold
        text = "\n" + text.partition("\n")[2]
    script = shimbuild.loader(text, f"#!{interpreter}")
    return ownership.mark_python_shim(script.encode("utf-8"))


def default_conflist(network_name: str = "kuryr",
                     daemon_socket: str | None = None) -> bytes:
    """The shape of etc/cni/net.d/10-kuryr.conflist; the shim finds the
    daemon through ``daemon_socket`` ([cni_daemon] bind_address)."""
    plugin = {"type": SHIM_NAME}
    if daemon_socket:
        plugin["daemon_socket"] = daemon_socket
    conflist = {"cniVersion": protocol.CONFLIST_VERSION,
                "cniVersions": list(protocol.SUPPORTED_VERSIONS),
                "name": network_name, "plugins": [plugin]}
    return ownership.mark_conflist(json.dumps(conflist).encode("utf-8"))


def compiled_shim(path: str | None = COMPILED_SHIM) -> bytes | None:
    """The compiled shim's bytes, or None when it was not built."""
    if not path or not os.access(path, os.X_OK):
        return None
    with open(path, "rb") as f:
        data = f.read()
    return data if data.startswith(b"\x7fELF") else None


class ForeignFile(Exception):
    """A file at an install path that another CNI wrote; not overwritten."""


def _claim(path: str, kind: str, force: bool) -> None:
    """Raise ForeignFile unless ``path`` is absent, ours, or ``force``."""
    reason = ownership.foreign(path, kind)
    if reason is None:
        return
    if not force:
        raise ForeignFile(f"{reason}; not overwriting it (remove it, or set "
                          "[cni_install] force = true)")
    LOG.warning("overwriting %s ([cni_install] force)", reason)


def install_shim(bin_dir: str, source: str = SHIM_SOURCE,
                 interpreter: str = DEFAULT_INTERPRETER, *,
                 compiled: str | None = COMPILED_SHIM,
                 force: bool = False) -> str:
    """The compiled shim when it was built, else the Python one."""
    path = os.path.join(bin_dir, SHIM_NAME)
    data = compiled_shim(compiled)
    kind = "compiled"
    if data is None:
        data, kind = shim_script(source, interpreter), "Python"
    if not _same(path, data):
        _claim(path, "shim", force)
    if atomic_write(path, data, 0o755):
        LOG.info("installed the %s CNI shim %s", kind, path)
    return path


def install_conflist(conf_dir: str, name: str, content: bytes, *,
                     force: bool = False) -> str:
    path = os.path.join(conf_dir, name)
    if not _same(path, content):
        _claim(path, "conflist", force)
    if atomic_write(path, content, 0o644):
        LOG.info("installed CNI network config %s", path)
    return path


def _same(path: str, data: bytes) -> bool:
    """Already what we would write (ours, even without a marker)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(data) + 1) == data
    except OSError:
        return False


def install_on_first_ready(conf: cfg.ConfigOpts, *,
                           shim_source: str = SHIM_SOURCE,
                           compiled: str | None = COMPILED_SHIM
                           ) -> list[str]:
    """Shim, then conflist; call once the daemon is ready. Returns the paths
    installed (empty when off); raises ForeignFile before writing anything
    when either path holds another CNI's file."""
    opts = conf.cni_install
    if not opts.enabled:
        return []
    if opts.conflist_template:
        with open(opts.conflist_template, "rb") as f:
            # refuse to install a broken conflist; mark it as ours
            content = ownership.mark_conflist(f.read())
    else:
        socket = conf.cni_daemon.bind_address if "cni_daemon" in conf \
            else None
        content = default_conflist(opts.network_name, socket)
    conflist = os.path.join(opts.conf_dir, opts.conflist_name)
    if not _same(conflist, content):
        _claim(conflist, "conflist", opts.force)   # before the shim is written
    shim = install_shim(opts.bin_dir, shim_source, opts.shim_interpreter,
                        compiled=compiled, force=opts.force)
    # claimed above: a file that appeared since is a race with root only
    install_conflist(opts.conf_dir, opts.conflist_name, content, force=True)
    return [shim, conflist]


class InstallOnFirstReady:
    """Feed it every readiness verdict; installs once, on the first ready.

    A failed install (e.g. a read-only host directory, or another CNI's file
    in the way) is logged once and tried again on the next ready verdict; it
    never takes the daemon down. :attr:`installed` lists what this run
    installed: all uninstall may remove.
    """

    def __init__(self, conf: cfg.ConfigOpts, *,
                 shim_source: str = SHIM_SOURCE,
                 compiled: str | None = COMPILED_SHIM) -> None:
        self._conf = conf
        self._shim_source = shim_source
        self._compiled = compiled
        self._failure = ""
        self.done = not conf.cni_install.enabled
        self.installed: list[str] = []

    def __call__(self, ready: bool) -> bool:
        """True when this call installed the files."""
        if self.done or not ready:
            return False
        try:
            paths = install_on_first_ready(
                self._conf, shim_source=self._shim_source,
                compiled=self._compiled)
        except ForeignFile as exc:
            if str(exc) != self._failure:
                LOG.error("not installing the CNI shim and conflist: %s", exc)
            self._failure = str(exc)
            return False
        except (OSError, ValueError):
            LOG.exception("installing the CNI shim and conflist failed")
            return False
        self.installed = paths
        self.done = True
        return True


def uninstall(paths: Sequence[str]) -> list[str]:
    """Remove ``paths`` (the conflist before the shim: the reverse of the
    install order, so the runtime never finds a conflist whose plugin is
    gone) that still carry our marker; a file another CNI put there since is
    left alone. Returns the paths removed. The DaemonSet's uninstall path
    calls it as the daemon's exit hook (``[cni_install] uninstall_on_stop``):
    without it, the kubelet keeps running a shim that answers "try again
    later" (code 11) forever.
    """
    removed = []
    for path in sorted(paths, key=lambda p: os.path.basename(p) == SHIM_NAME):
        kind = "shim" if os.path.basename(path) == SHIM_NAME else "conflist"
        if not os.path.lexists(path):
            continue
        reason = ownership.foreign(path, kind)
        if reason is not None:
            LOG.warning("not removing %s", reason)
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        LOG.info("removed %s", path)
        removed.append(path)
    return removed


def uninstall_on_stop(conf: cfg.ConfigOpts, exit_code: object,
                      installed: Sequence[str] = ()) -> list[str]:
    """The exit hook: only after a graceful stop (status 0), only when
    asked, and only what this run ``installed``: a daemon that never became
    ready installed nothing and removes nothing. A crash or a restart for
    health leaves the host as it is."""
    opts = conf.cni_install
    if exit_code not in (0, None) or not (opts.enabled
                                          and opts.uninstall_on_stop):
        return []
    if not installed:
        LOG.info("uninstall_on_stop: this run installed nothing; removing "
                 "nothing")
        return []
    try:
        return uninstall(installed)
    except OSError:
        LOG.exception("removing the CNI shim and conflist failed")
        return []
