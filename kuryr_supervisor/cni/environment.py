"""Probes of the node's environment that the Server's faults depend on,
and the Fault bits they raise and clear.

Each probe raises the :class:`~kuryr_supervisor.errors.EnvironmentFault` it
finds and returns quietly when that fault is gone, so the Server's watch
(:func:`verify`) can clear a readiness failure once the operator has fixed
the cause (freed space, granted the capability) without a restart.
"""
from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable

from kuryr_supervisor import errors
from kuryr_supervisor.cni.ports import Binding, Ipam
from kuryr_supervisor.state import Fault, SharedState

LOG = logging.getLogger(__name__)

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


def record_fault(state: SharedState | None, exc: errors.EnvironmentFault,
                 present: bool) -> None:
    """Raise or clear ``exc``'s Fault bit; logged once, when it appears."""
    if state is None or not exc.fault:
        return
    if state.set_fault(Fault[exc.fault], present) and present:
        LOG.error("environment fault, readiness fails until it is fixed "
                  "(not counted as a CNI failure): %s", exc.msg)


def verify(state: SharedState | None, state_dir: str,
           ipam: Callable[[], Ipam], binding: Binding) -> Fault:
    """Look for the persistent faults again (Server start, then a timer):
    the store's integrity, a write in ``state_dir``, the bridge's kind,
    CAP_NET_ADMIN. Raises or clears each Fault bit; returns the faults
    found. Never raises."""
    found = Fault.NONE
    probes: list[tuple[Fault, Callable[[], None]]] = [
        (Fault.IPAM_STORE, lambda: _verify(ipam())),
        # Read when it runs: the store's probe may have just raised it.
        (Fault.DISK_FULL, lambda: disk_probe(
            state_dir, write=bool(_faults(state) & Fault.DISK_FULL))),
        (Fault.BRIDGE_KIND, lambda: _verify(binding)),
        (Fault.NET_ADMIN, require_net_admin),
    ]
    for fault, probe in probes:
        try:
            probe()
        except errors.EnvironmentFault as exc:
            found |= Fault[exc.fault]
            record_fault(state, exc, True)
            continue
        except Exception as exc:  # noqa: BLE001 - a probe, not a verdict
            LOG.debug("environment probe %s failed: %s", fault.name, exc)
            continue
        if state is not None and state.set_fault(fault, False):
            LOG.warning("environment fault cleared: %s", fault.name)
    return found


def _faults(state: SharedState | None) -> Fault:
    return state.faults() if state is not None else Fault.NONE


def _verify(part: object) -> None:
    """The store's or the binding's own check, when it has one (fakes and
    an external IPAM may not)."""
    verify = getattr(part, "verify", None)
    if verify is not None:
        verify()
