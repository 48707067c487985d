"""The controller role (``role = controller``): the cluster's handlers.

Workers: one Handler process per ``[controller] handlers`` entry (each in a
slot of its own, named ``handler:<name>``) and the HealthManager. Listeners:
the probes and ``/metrics``; no CNI socket, this role plumbs nothing on its
host. Its HealthManager runs the controller's base checks
(:func:`~kuryr_supervisor.health.checks.controller.controller_checks`) and
the dependencies' (:func:`~.dependencies.dependency_checks`), and speaks
for no node. Preflight: each configured handler's entry point is
installed. Shared state: the port pools' figures, the creates at Neutron
kept for a restarted handler, the network judge's verdicts, the services
handler's load balancers. No hooks.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from oslo_config import cfg

from kuryr_supervisor.master import preflight
from kuryr_supervisor.master.activation import METRICS, PROBES
from kuryr_supervisor.master.roles.base import Preflight, Role, Service
from kuryr_supervisor.state import Component, Section, controller_components

if TYPE_CHECKING:
    from kuryr_supervisor.master.listeners import Listeners


def handlers_installed(conf: cfg.ConfigOpts) -> None:
    """Each handler process loads its own entry point after the fork: one
    that is not installed would be a crash loop, not a start-up error."""
    from kuryr_supervisor.controller import handlers
    missing = handlers.missing(conf.controller.handlers)
    if missing:
        raise preflight.PreflightError(
            f"[controller] handlers: no entry point named "
            f"{', '.join(missing)} in {handlers.NAMESPACE}")


class ControllerRole(Role):
    """See the module."""

    name = "controller"
    listeners = (PROBES, METRICS)
    sections = frozenset({Section.POOLS, Section.CREATES, Section.VERDICTS,
                          Section.LOAD_BALANCERS, Section.POLICIES})

    def components(self, conf: cfg.ConfigOpts) -> tuple[Component, ...]:
        return controller_components(conf.controller.handlers)

    def workers(self, conf: cfg.ConfigOpts,
                sockets: Listeners) -> list[Service]:
        from kuryr_supervisor.health.checks.controller import controller_checks
        from kuryr_supervisor.master.roles.dependencies import dependency_checks
        from kuryr_supervisor.workers.handler import HandlerWorker
        from kuryr_supervisor.workers.health import HealthManagerWorker
        return [
            (HandlerWorker, {}),
            (HealthManagerWorker, {"check_factory": dependency_checks,
                                   "base_checks": controller_checks,
                                   "node_network": None,
                                   "probe_listener": sockets.probe,
                                   "metrics_listener": sockets.metrics}),
        ]

    def checks(self) -> list[Preflight]:
        return [handlers_installed]


ROLE = ControllerRole()
