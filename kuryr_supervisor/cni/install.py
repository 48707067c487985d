"""Install the kuryr-cni shim and the conflist on the host, once ready.

The master calls :func:`install_on_first_ready` when the daemon first
becomes ready (``[cni_install] enabled``, i.e. in the DaemonSet). Order is
the point: the kubelet declares a node's network ready as soon as a
conflist appears in ``conf_dir``, so the shim goes in first and the
conflist last, and neither before the daemon can serve them.

Invariants: both files are written to a temporary name in the target
directory and renamed into place, so the runtime never reads half a file
and an executing old shim is never overwritten in place (no ETXTBSY); an
identical file is left untouched.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile

from oslo_config import cfg

from kuryr_supervisor.cni import protocol

LOG = logging.getLogger(__name__)

SHIM_NAME = "kuryr-cni"
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
    """The shim module's text with the shebang the runtime will exec."""
    with open(source, encoding="utf-8") as f:
        text = f.read()
    if text.startswith("#!"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
    return f"#!{interpreter}\n{text}".encode()


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
    return (json.dumps(conflist, indent=2) + "\n").encode("utf-8")


def compiled_shim(path: str | None = COMPILED_SHIM) -> bytes | None:
    """The compiled shim's bytes, or None when it was not built."""
    if not path or not os.access(path, os.X_OK):
        return None
    with open(path, "rb") as f:
        data = f.read()
    return data if data.startswith(b"\x7fELF") else None


def install_shim(bin_dir: str, source: str = SHIM_SOURCE,
                 interpreter: str = DEFAULT_INTERPRETER, *,
                 compiled: str | None = COMPILED_SHIM) -> str:
    """The compiled shim when it was built, else the Python one."""
    path = os.path.join(bin_dir, SHIM_NAME)
    data = compiled_shim(compiled)
    kind = "compiled"
    if data is None:
        data, kind = shim_script(source, interpreter), "Python"
    if atomic_write(path, data, 0o755):
        LOG.info("installed the %s CNI shim %s", kind, path)
    return path


def install_conflist(conf_dir: str, name: str, content: bytes) -> str:
    path = os.path.join(conf_dir, name)
    if atomic_write(path, content, 0o644):
        LOG.info("installed CNI network config %s", path)
    return path


def install_on_first_ready(conf: cfg.ConfigOpts, *,
                           shim_source: str = SHIM_SOURCE,
                           compiled: str | None = COMPILED_SHIM) -> bool:
    """Shim, then conflist; call once the daemon is ready. False when off."""
    opts = conf.cni_install
    if not opts.enabled:
        return False
    install_shim(opts.bin_dir, shim_source, opts.shim_interpreter,
                 compiled=compiled)
    if opts.conflist_template:
        with open(opts.conflist_template, "rb") as f:
            content = f.read()
        json.loads(content)        # refuse to install a broken conflist
    else:
        socket = conf.cni_daemon.bind_address if "cni_daemon" in conf \
            else None
        content = default_conflist(opts.network_name, socket)
    install_conflist(opts.conf_dir, opts.conflist_name, content)
    return True


class InstallOnFirstReady:
    """Feed it every readiness verdict; installs once, on the first ready.

    A failed install (e.g. a read-only host directory) is logged and tried
    again on the next ready verdict; it never takes the daemon down.
    """

    def __init__(self, conf: cfg.ConfigOpts, *,
                 shim_source: str = SHIM_SOURCE,
                 compiled: str | None = COMPILED_SHIM) -> None:
        self._conf = conf
        self._shim_source = shim_source
        self._compiled = compiled
        self.done = not conf.cni_install.enabled

    def __call__(self, ready: bool) -> bool:
        """True when this call installed the files."""
        if self.done or not ready:
            return False
        try:
            install_on_first_ready(self._conf, shim_source=self._shim_source,
                                   compiled=self._compiled)
        except (OSError, ValueError):
            LOG.exception("installing the CNI shim and conflist failed")
            return False
        self.done = True
        return True


def uninstall(conf: cfg.ConfigOpts) -> list[str]:
    """Remove the conflist, then the shim: the reverse of the install order,
    so the runtime never finds a conflist whose plugin is gone. Returns the
    paths removed. The DaemonSet's uninstall path calls it as the daemon's
    exit hook (``[cni_install] uninstall_on_stop``): without it, the kubelet
    keeps running a shim that answers "try again later" (code 11) forever.
    """
    opts = conf.cni_install
    removed = []
    for path in (os.path.join(opts.conf_dir, opts.conflist_name),
                 os.path.join(opts.bin_dir, SHIM_NAME)):
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        LOG.info("removed %s", path)
        removed.append(path)
    return removed


def uninstall_on_stop(conf: cfg.ConfigOpts, exit_code: object) -> list[str]:
    """The exit hook: only after a graceful stop (status 0) and only when
    asked; a crash or a restart for health leaves the host as it is."""
    opts = conf.cni_install
    if exit_code not in (0, None) or not (opts.enabled
                                          and opts.uninstall_on_stop):
        return []
    try:
        return uninstall(conf)
    except OSError:
        LOG.exception("removing the CNI shim and conflist failed")
        return []
