"""The ``memory`` liveness check: the whole daemon's memory against a limit.

Where the figure comes from, first match wins:

1. ``[cni_health_server] cg_path``: that directory's ``memory.current`` (v2),
   else ``memory.memsw.usage_in_bytes``, else ``memory.usage_in_bytes`` (v1);
2. the master's cgroup from ``/proc/<master pid>/cgroup``: the v2 entry
   (``0::/path`` → ``<v2 root>/path/memory.current``, where the v2 root is the
   cgroup root if it is a cgroup2 mount, else its ``unified`` directory), then
   the v1 ``memory`` controller entry (memsw, else plain usage);
3. the sum of USS over the master's process tree.

A cgroup path of ``/`` is the root cgroup: its usage is the whole host's, so it
is never used. Nothing here raises for a missing or unreadable file; the
result message names the source that was used.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

from oslo_config import cfg

from kuryr_supervisor.health import processes
from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort
from kuryr_supervisor.state import LiveCause

MiB = 1024 * 1024
_V2_FILES = ("memory.current",)
_V1_FILES = ("memory.memsw.usage_in_bytes", "memory.usage_in_bytes")

TreeUss = Callable[[int], "processes.TreeMemory | None"]


@dataclasses.dataclass(frozen=True)
class Reading:
    """A daemon memory figure and where it came from."""

    bytes: int
    source: str


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _first_readable(directory: str, names: tuple[str, ...],
                    label: str) -> Reading | None:
    for name in names:
        path = os.path.join(directory, name)
        value = _read_int(path)
        if value is not None:
            return Reading(value, f"{label} {path}")
    return None


class DaemonMemory:
    """Measures the daemon's total memory (see the module docstring)."""

    def __init__(self, master_pid: int, *, proc_root: str = "/proc",
                 cgroup_root: str = "/sys/fs/cgroup",
                 tree_uss: TreeUss = processes.tree_uss) -> None:
        self.master_pid = master_pid
        self.proc_root = proc_root
        self.cgroup_root = cgroup_root
        self._tree_uss = tree_uss

    def read(self, cg_path: str = "") -> Reading | None:
        if cg_path:
            reading = _first_readable(cg_path, _V2_FILES + _V1_FILES,
                                      "cg_path")
            if reading is not None:
                return reading
        reading = self._from_master_cgroup()
        if reading is not None:
            return reading
        tree = self._tree_uss(self.master_pid)
        if tree is None:
            return None
        return Reading(tree.uss, f"USS of {tree.processes} processes under "
                                 f"pid {self.master_pid}")

    def _cgroup_entries(self) -> tuple[str | None, str | None]:
        """The master's (v2 path, v1 memory path); ``None`` when absent."""
        v2 = v1 = None
        path = os.path.join(self.proc_root, str(self.master_pid), "cgroup")
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError:
            return None, None
        for line in lines:
            parts = line.split(":", 2)
            if len(parts) != 3:
                continue
            hierarchy, controllers, cgroup = parts
            if hierarchy == "0" and controllers == "":
                v2 = cgroup
            elif "memory" in controllers.split(","):
                v1 = cgroup
        return v2, v1

    def _v2_root(self) -> str | None:
        for root in (self.cgroup_root,
                     os.path.join(self.cgroup_root, "unified")):
            if os.path.exists(os.path.join(root, "cgroup.controllers")):
                return root
        return None

    def _from_master_cgroup(self) -> Reading | None:
        v2, v1 = self._cgroup_entries()
        if v2 and v2 != "/":
            root = self._v2_root()
            if root is not None:
                reading = _first_readable(
                    os.path.join(root, v2.lstrip("/")), _V2_FILES, "cgroup v2")
                if reading is not None:
                    return reading
        if v1 and v1 != "/":
            return _first_readable(
                os.path.join(self.cgroup_root, "memory", v1.lstrip("/")),
                _V1_FILES, "cgroup v1")
        return None


class MemoryCheck(Check):
    """Liveness fails when the daemon uses more than ``max_memory_usage`` MiB.

    The figure is measured even when the limit is off (-1), for the metrics.
    A daemon whose memory cannot be measured at all passes: restarting it
    would not make the figure readable.
    """

    name = "memory"
    kind = Kind.LIVENESS
    sort = Sort.IO
    cause = LiveCause.MEMORY

    def __init__(self, conf: cfg.ConfigOpts, meter: DaemonMemory) -> None:
        self.conf = conf
        self.meter = meter

    def run(self, now: float) -> Result:
        opts = self.conf.cni_health_server
        limit = int(opts.max_memory_usage)
        reading = self.meter.read(opts.cg_path or "")
        if reading is None:
            return Result.passed("daemon memory cannot be measured; "
                                 "not enforcing")
        used = f"{reading.bytes / MiB:.0f} MiB"
        if limit < 0:
            return Result.passed(f"{used}, no limit ({reading.source})",
                                 reading.bytes)
        text = f"{used} of {limit} MiB ({reading.source})"
        if reading.bytes > limit * MiB:
            return Result.failed(f"memory over limit: {text}", reading.bytes)
        return Result.passed(text, reading.bytes)
