"""Health checks: one small object per check (see :mod:`.base`).

:func:`default_checks` builds the daemon's set in a fixed order (the order of
``?verbose`` listings). Work that adds checks, such as the Kubernetes API
readiness check ``k8s-api``, passes them as ``extra``; the HealthManager's
``checker`` check is added by the monitor itself.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from oslo_config import cfg

from kuryr_supervisor.cni.netlink import probe as netlink_probe
from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort
from kuryr_supervisor.health.checks.budgets import (
    CheckerCheck,
    CNIFailuresCheck,
    DrainingCheck,
    RestartBudgetCheck,
    ServerCapacityCheck,
)
from kuryr_supervisor.health.checks.capabilities import NetAdminCheck
from kuryr_supervisor.health.checks.components import (
    ComponentAliveCheck,
    server_accepting,
    watcher_synced,
)
from kuryr_supervisor.health.checks.faults import EnvironmentCheck
from kuryr_supervisor.health.checks.install import InstallPathsCheck
from kuryr_supervisor.health.checks.memory import DaemonMemory, MemoryCheck
from kuryr_supervisor.health.checks.netlink import NetlinkCheck
from kuryr_supervisor.state import Component, SharedState

__all__ = ["Check", "CheckerCheck", "Kind", "Result", "Sort",
           "default_checks"]


def default_checks(state: SharedState, conf: cfg.ConfigOpts, master_pid: int,
                   *, extra: Iterable[Check] = (),
                   probe: Callable[[], None] = netlink_probe,
                   proc_root: str = "/proc",
                   cgroup_root: str = "/sys/fs/cgroup") -> list[Check]:
    """Every check of the daemon except ``checker``, ``extra`` last."""

    def plumbing_pid() -> int:
        """The Server does the plumbing; the master while it is down."""
        server = state.component(Component.SERVER)
        return server.pid if server.alive and server.pid else master_pid

    checks: list[Check] = [
        NetlinkCheck(probe),
        *(ComponentAliveCheck(state, conf, c) for c in state.active),
        CNIFailuresCheck(state, conf),
        MemoryCheck(conf, DaemonMemory(master_pid, proc_root=proc_root,
                                       cgroup_root=cgroup_root)),
        RestartBudgetCheck(state, conf),
        NetAdminCheck(plumbing_pid, proc_root=proc_root),
        watcher_synced(state),
        server_accepting(state),
        EnvironmentCheck(state, conf),
        InstallPathsCheck(conf),
        ServerCapacityCheck(state),
        DrainingCheck(state),
        *extra,
    ]
    names = [c.name for c in checks]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"duplicate check names: {sorted(duplicates)}")
    return checks
