"""The ``net-admin`` readiness check: CAP_NET_ADMIN in the effective set.

Without it every CNI ADD fails with EPERM, so the node must not be reported
ready. It reads ``CapEff`` from ``/proc/<pid>/status`` (an injected proc root,
so tests use a fixture tree); ``pid`` is a callable because the process that
does the plumbing (the Server) is replaced when it restarts.
"""
from __future__ import annotations

import os
from collections.abc import Callable

from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort

CAP_NET_ADMIN = 12


def effective_capabilities(pid: int, proc_root: str = "/proc") -> int:
    """The CapEff bit mask of ``pid``; raises OSError/ValueError if unreadable."""
    path = os.path.join(proc_root, str(pid), "status")
    with open(path, encoding="ascii", errors="replace") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split(":", 1)[1].strip(), 16)
    raise ValueError(f"no CapEff line in {path}")


class NetAdminCheck(Check):
    name = "net-admin"
    kind = Kind.READINESS
    sort = Sort.IO

    def __init__(self, pid: Callable[[], int] = os.getpid, *,
                 proc_root: str = "/proc") -> None:
        self._pid = pid
        self.proc_root = proc_root

    def run(self, now: float) -> Result:
        pid = self._pid()
        try:
            caps = effective_capabilities(pid, self.proc_root)
        except (OSError, ValueError) as exc:
            return Result.failed(f"cannot read capabilities of pid {pid}: "
                                 f"{exc}")
        if caps & (1 << CAP_NET_ADMIN):
            return Result.passed(f"CAP_NET_ADMIN effective (pid {pid})")
        return Result.failed(f"CAP_NET_ADMIN missing from CapEff "
                             f"{caps:016x} (pid {pid})")
