"""Probes of the node's environment that the Server's faults depend on.

Each raises the :class:`~kuryr_supervisor.errors.EnvironmentFault` it finds
and returns quietly when that fault is gone, so the Server's watch can clear
a readiness failure once the operator has fixed the cause (freed space,
granted the capability) without a restart.
"""
from __future__ import annotations

import errno
import os

from kuryr_supervisor import errors

#: Bytes written by the write probe: more than one SQLite page, so a disk
#: with less room than an allocation needs is found too.
PROBE_BYTES = 64 * 1024
_CAP_NET_ADMIN = 12
_PROBE_NAME = ".write-probe"


def disk_probe(state_dir: str, *, write: bool) -> None:
    """StoreUnwritable when ``state_dir``'s file system is read-only or has
    less than :data:`PROBE_BYTES` free (statvfs: cheap, for the timer); with
    ``write``, also prove it by writing (to clear a fault: quotas, immutable
    files and permissions show only then)."""
    try:
        st = os.statvfs(state_dir)
    except OSError:
        return              # a missing directory is the store's to report
    if st.f_flag & os.ST_RDONLY:
        raise errors.StoreUnwritable(f"state directory {state_dir} is on a "
                                     "read-only file system")
    if st.f_bfree * st.f_frsize < PROBE_BYTES:
        raise errors.StoreUnwritable(f"state directory {state_dir} is full "
                                     f"({st.f_bfree * st.f_frsize} bytes free)")
    if write:
        write_probe(state_dir)


def write_probe(state_dir: str) -> None:
    """Write, sync and remove a small file in ``state_dir``.

    A full, read-only or forbidden file system raises StoreUnwritable;
    statvfs alone would miss quotas, immutable files and a file system
    remounted read-only under us.
    """
    path = os.path.join(state_dir, _PROBE_NAME)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                     0o600)
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS,
                         errno.EACCES, errno.EPERM, errno.EIO):
            raise errors.StoreUnwritable(
                f"state directory {state_dir} cannot be written: "
                f"{exc.strerror}") from exc
        raise
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def require_net_admin(status_path: str = "/proc/self/status") -> None:
    """Raise NoNetAdmin unless this process holds CAP_NET_ADMIN."""
    with open(status_path) as f:
        for line in f:
            if line.startswith("CapEff:"):
                if not int(line.split()[1], 16) >> _CAP_NET_ADMIN & 1:
                    raise errors.NoNetAdmin(
                        "the daemon lacks CAP_NET_ADMIN: netlink changes "
                        "are refused")
                return
