"""The controller role's checks (``--role controller``).

Liveness: each worker alive and heartbeating (``handler``, ``health``), the
handlers' failure budget (``handler-failures``: ``[controller]
handler_failures_count`` consecutive failed steps), daemon memory and the
restart budget. Readiness: the handlers caught up (``handler-synced``), not
draining, and the dependencies (:mod:`.openstack`): ``k8s-watch``,
``keystone``, ``neutron``.
"""
from __future__ import annotations

from collections.abc import Iterable

from oslo_config import cfg

from kuryr_supervisor.health.checks.base import Check
from kuryr_supervisor.health.checks.budgets import (
    DrainingCheck,
    FailureBudgetCheck,
    RestartBudgetCheck,
)
from kuryr_supervisor.health.checks.components import (
    ComponentAliveCheck,
    ComponentReadyCheck,
)
from kuryr_supervisor.health.checks.memory import DaemonMemory, MemoryCheck
from kuryr_supervisor.health.checks.openstack import K8sWatchCheck, openstack_checks
from kuryr_supervisor.state import Component, LiveCause, SharedState


class HandlerFailuresCheck(FailureBudgetCheck):
    name = "handler-failures"
    cause = LiveCause.HANDLER_FAILURES
    what = "handler failures"

    def count(self) -> int:
        return self.state.handler_failures()

    def limit(self) -> int:
        return int(self.conf.controller.handler_failures_count)


def controller_checks(state: SharedState, conf: cfg.ConfigOpts,
                      master_pid: int, *, extra: Iterable[Check] = (),
                      proc_root: str = "/proc",
                      cgroup_root: str = "/sys/fs/cgroup") -> list[Check]:
    """The controller role's base checks, ``extra`` last."""
    return [
        *(ComponentAliveCheck(state, conf, c) for c in state.active),
        HandlerFailuresCheck(state, conf),
        MemoryCheck(conf, DaemonMemory(master_pid, proc_root=proc_root,
                                       cgroup_root=cgroup_root)),
        RestartBudgetCheck(state, conf),
        ComponentReadyCheck(state, Component.HANDLER, "handler-synced",
                            "handlers have not caught up yet"),
        DrainingCheck(state),
        *extra,
    ]


def dependency_checks(state: SharedState, conf: cfg.ConfigOpts) -> list[Check]:
    """The HealthManager's ``check_factory`` in the controller role: built in
    the worker after the fork, so no client is shared with the master."""
    from kuryr_supervisor.kubernetes import client as k8s
    client = k8s.K8sClient.from_conf(conf)
    timeout = float(conf.kubernetes.api_check_timeout)
    watch = K8sWatchCheck(lambda: client.probe_watch(timeout),
                          lambda: float(conf.kubernetes.api_check_interval))
    return [watch, *openstack_checks(conf)]
