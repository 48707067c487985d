"""The CNI role (``role = cni``, the default): the node daemon.

Workers: the Watcher, the Server and the HealthManager, one process each.
Listeners: the CNI socket (served by the Server, watched by the master),
the probes and ``/metrics`` (the HealthManager). Its HealthManager speaks
for the node: STATUS flags, the node's NodeNetwork record and its Events
(:mod:`kuryr_supervisor.netcheck.node.assembly`: the data-plane checks
over one OVSDB connection, the record, the canary;
:mod:`kuryr_supervisor.health.nodeevents`), and runs the node's other
checks (:func:`node_checks`) beside the base set. Preflight: the CNI socket's path is trusted. Shared state: what
CNI STATUS answers and the pods whose port is lost. Hooks: the shim and
conflist installed on first readiness and uninstalled after a graceful
stop (``[cni_install]``), the node released from the network judge
(``uninstall_on_stop``), the IPAM store and pod registry checkpointed
after the last worker.

Nothing here imports the controller or OpenStack code at import time: the
OpenStack checks (``[controller] openstack_checks``) are loaded by the
HealthManager's factory, after the fork, only when asked for.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from oslo_config import cfg

from kuryr_supervisor.master import preflight
from kuryr_supervisor.master.activation import CNI, METRICS, PROBES
from kuryr_supervisor.master.roles.base import Hooks, Preflight, Role, Service
from kuryr_supervisor.state import CNI_COMPONENTS, Component, Section, SharedState

if TYPE_CHECKING:
    from kuryr_supervisor.health.checks import Check
    from kuryr_supervisor.master.listeners import Listeners


def node_checks(state: SharedState, conf: cfg.ConfigOpts,
                master_pid: int) -> list[Check]:
    """The HealthManager's ``check_factory``: built in the worker, after the
    fork, so the API client is never shared with the master (``k8s-api``;
    Keystone's and Neutron's when ``[controller] openstack_checks``). The
    data-plane checks are the node side of network health's
    (:mod:`kuryr_supervisor.netcheck.node.assembly`)."""
    from kuryr_supervisor.health.checks import kubernetes
    check = kubernetes.from_conf(conf, master_pid=master_pid)
    checks: list[Check] = [check] if check is not None else []
    if conf.controller.openstack_checks:     # the CNI role uses Neutron too
        from kuryr_supervisor.master.roles.dependencies import openstack_checks
        checks.extend(openstack_checks(conf, master_pid=master_pid))
    return checks


def settle_stores(conf: cfg.ConfigOpts) -> None:
    """Checkpoint the node's SQLite files as their last user: a graceful
    stop leaves neither ``-wal`` nor ``-shm`` beside them, whichever worker
    was cut off while it used one."""
    from kuryr_supervisor.cni.ipam import database
    from kuryr_supervisor.conf import ipam as ipam_conf
    from kuryr_supervisor.kubernetes.registry import registry_path
    for path in (ipam_conf.settings(conf).db_path,
                 registry_path(conf.ipam.state_dir)):
        database.settle(path)


class CNIRole(Role):
    """See the module."""

    name = "cni"
    listeners = (CNI, PROBES, METRICS)
    sections = frozenset({Section.CNI_STATUS, Section.LOST_PORTS})
    installs_shim = True

    def components(self, conf: cfg.ConfigOpts) -> tuple[Component, ...]:
        return CNI_COMPONENTS

    def workers(self, conf: cfg.ConfigOpts,
                sockets: Listeners) -> list[Service]:
        from kuryr_supervisor.netcheck.node import assembly
        from kuryr_supervisor.workers.health import HealthManagerWorker
        from kuryr_supervisor.workers.server import ServerWorker
        from kuryr_supervisor.workers.watcher import WatcherWorker
        return [
            (WatcherWorker, {}),
            (ServerWorker, {"listener": sockets.cni,
                            "handoff": sockets.handoff}),
            (HealthManagerWorker, {"check_factory": node_checks,
                                   "node_network": assembly.build,
                                   "probe_listener": sockets.probe,
                                   "metrics_listener": sockets.metrics}),
        ]

    def checks(self) -> list[Preflight]:
        return [preflight.cni_socket_path]

    def hooks(self, conf: cfg.ConfigOpts) -> Hooks:
        from kuryr_supervisor.cni.install import (
            InstallOnFirstReady,
            uninstall_on_stop,
        )
        installer = InstallOnFirstReady(conf)

        def uninstall(code: object) -> None:
            uninstall_on_stop(conf, code, installer.installed)

        def release(code: object) -> None:
            from kuryr_supervisor.netcheck.node.netrecord import release_on_stop
            release_on_stop(conf, code)
        return Hooks(ready=(installer,), stopped=(lambda: settle_stores(conf),),
                     exited=(uninstall, release))


ROLE = CNIRole()
