"""Readiness ``cni-install``: no other CNI's file at the install paths.

With ``[cni_install] enabled`` the master installs the shim and the conflist
once the daemon is first ready. A file already at either path that does not
carry our marker (:mod:`kuryr_supervisor.cni.ownership`), such as upstream
Kuryr's ``kuryr-cni``, belongs to another CNI: the installer will not
overwrite it, and this check keeps the daemon not ready, naming the file, so
the operator removes it or sets ``[cni_install] force``. Failing readiness
before the first install also means the install never starts over a foreign
file. Restarting cannot fix it, so it is readiness, never liveness.

An I/O check (it reads the files), on the HealthManager's timer; a file is
read again only when its inode, size or times change.
"""
from __future__ import annotations

import os

from oslo_config import cfg

from kuryr_supervisor.cni import ownership
from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort

_Key = tuple[int, int, int, int, int]


class InstallPathsCheck(Check):
    name = "cni-install"
    kind = Kind.READINESS
    sort = Sort.IO

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.conf = conf
        self._seen: dict[str, tuple[_Key, str | None]] = {}

    def run(self, now: float) -> Result:
        opts = self.conf.cni_install if "cni_install" in self.conf else None
        if opts is None or not opts.enabled:
            return Result.passed("not installing ([cni_install] enabled is "
                                 "off)")
        reasons = [reason for path, kind in (
            (os.path.join(opts.conf_dir, opts.conflist_name), "conflist"),
            (os.path.join(opts.bin_dir, ownership.SHIM_NAME), "shim"))
            if (reason := self._foreign(path, kind)) is not None]
        if not reasons:
            return Result.passed()
        if opts.force:
            return Result.passed(f"{'; '.join(reasons)}: will be overwritten "
                                 "([cni_install] force)")
        return Result.failed(f"{'; '.join(reasons)}; not overwriting it "
                             "(remove it, or set [cni_install] force = true)")

    def _foreign(self, path: str, kind: str) -> str | None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            self._seen.pop(path, None)
            return None
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
               st.st_ctime_ns)
        seen = self._seen.get(path)
        if seen is not None and seen[0] == key:
            return seen[1]
        reason = ownership.foreign(path, kind)
        self._seen[path] = (key, reason)
        return reason
