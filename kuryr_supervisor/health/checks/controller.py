"""The controller role's checks (``--role controller``).

Liveness: each worker alive and heartbeating (one ``handler:<name>`` per
handler process, and ``health``), the handlers' failure budget
(``handler-failures``), daemon memory and the restart budget. Readiness: the
handlers caught up (``handler-synced``), not draining, and the dependencies
(``k8s-watch``, ``keystone``, ``neutron``: built by the controller role's
factory, :mod:`kuryr_supervisor.master.roles.dependencies`, which holds the
OpenStack adapter).

Liveness is per handler (a dead or stale handler is named, and only its
process is restarted); the failure budget and readiness are one check each
over all handlers, naming the ones at fault: each handler's consecutive
failures are its own (one handler's success never resets another's count)
and any handler reaching ``[controller] handler_failures_count`` fails
liveness; the controller is ready when every handler has caught up, since a
pod needs every handler's work.
"""
from __future__ import annotations

from collections.abc import Iterable

from oslo_config import cfg

from kuryr_supervisor.health.checks.base import Check, Kind, Result
from kuryr_supervisor.health.checks.budgets import (
    DrainingCheck,
    FailureBudgetCheck,
    RestartBudgetCheck,
)
from kuryr_supervisor.health.checks.components import (
    ComponentAliveCheck,
    down_reason,
)
from kuryr_supervisor.health.checks.faults import describe
from kuryr_supervisor.health.checks.memory import DaemonMemory, MemoryCheck
from kuryr_supervisor.state import Fault, LiveCause, Mode, SharedState, WorkerKind

#: The fault bits the controller's port handler raises.
CONTROLLER_FAULTS = (Fault.SUBNET_FULL, Fault.NETWORK_MISSING,
                     Fault.SUBNET_MISSING, Fault.NEUTRON_FORBIDS,
                     Fault.SWEEP_UNPROVEN, Fault.PORT_LOST,
                     Fault.PODS_LAGGING)
#: Those that make it not ready: Neutron refuses every port it is asked.
REFUSALS = (Fault.SUBNET_FULL, Fault.NETWORK_MISSING, Fault.SUBNET_MISSING,
            Fault.NEUTRON_FORBIDS)


def describe_modes(modes: Mode) -> str:
    """How the port handler makes ports, as Neutron lets it ("": not known
    yet)."""
    said = []
    if Mode.TAGS_AT_CREATE in modes:
        said.append("port tags set as ports are made")
    elif Mode.TAGS_AFTER_CREATE in modes:
        said.append("port tags set after each create through the tags API "
                    "(Neutron lacks the ML2 extension driver "
                    "tag_ports_during_bulk_creation)")
    if Mode.MACS_DERIVED in modes:
        said.append("MAC addresses derived from pod UIDs (creates are "
                    "idempotent)")
    elif Mode.MACS_NEUTRONS in modes:
        said.append("MAC addresses Neutron's (the controller may not choose "
                    "them: creates whose answer was lost are waited for)")
    if Mode.UNBOUND in modes:
        said.append("ports made unbound (Neutron refuses binding:host_id)")
    return "; ".join(said)


class HandlerFailuresCheck(FailureBudgetCheck):
    """The failure budget, held against each handler's own count."""

    name = "handler-failures"
    cause = LiveCause.HANDLER_FAILURES
    what = "handler failures"

    def count(self) -> int:
        return max(self.state.handler_failures().values(), default=0)

    def limit(self) -> int:
        return int(self.conf.controller.handler_failures_count)

    def run(self, now: float) -> Result:
        result = super().run(now)
        if result.ok:
            return result
        limit = self.limit()
        over = ", ".join(f"{c.handler} {n}" for c, n in
                         self.state.handler_failures().items() if n >= limit)
        return Result.failed(f"{result.message}: {over}", result.value)


class HandlersSyncedCheck(Check):
    """Readiness: every handler process runs and has caught up."""

    name = "handler-synced"
    kind = Kind.READINESS

    def __init__(self, state: SharedState) -> None:
        self.state = state

    def run(self, now: float) -> Result:
        waiting = []
        for comp in self.state.of_kind(WorkerKind.HANDLER):
            status = self.state.component(comp)
            if not status.alive:
                waiting.append(f"{comp.handler} not running: "
                               f"{down_reason(status)}")
            elif not status.ready:
                waiting.append(f"{comp.handler} has not caught up yet")
        if waiting:
            return Result.failed("; ".join(waiting))
        return Result.passed()


class NeutronPortsCheck(Check):
    """Readiness ``neutron-ports``: what the port handler cannot fix, from
    its fault bits, and how it makes ports (its modes). A full pod subnet,
    a pod network or subnet that does not exist, or a policy that forbids
    the creates fails it, naming Neutron and what is missing (a
    dependency's refusal: not ready, never not live, as a full quota); a
    sweep that is off (Neutron ignores tag filters), a port lost for good
    or a lagging pod list only say so in its message (ports are still
    made; ``/metrics`` shows each bit), as do the modes (tags set at
    create or after, MACs derived or Neutron's)."""

    name = "neutron-ports"
    kind = Kind.READINESS

    def __init__(self, state: SharedState, conf: cfg.ConfigOpts) -> None:
        self.state, self.conf = state, conf

    def run(self, now: float) -> Result:
        faults = self.state.faults()
        failing = [describe(f, self.conf) for f in REFUSALS if f in faults]
        notes = [describe(f, self.conf) for f in CONTROLLER_FAULTS
                 if f in faults and f not in REFUSALS]
        modes = describe_modes(self.state.modes())
        if failing:
            return Result.failed("; ".join([*failing, *notes]))
        return Result.passed("; ".join([*notes, *([modes] if modes else [])])
                             or "ok")


class NetworkPolicyCheck(Check):
    """Readiness ``network-policy``, where the ``network_policy`` handler
    runs: Neutron as that handler last saw it (its board). Neutron that
    does not answer its calls, or refuses what the NetworkPolicies need (a
    quota met, a conflict that persists), fails it naming Neutron: a
    dependency's refusal, not ready, never not live; the port handler is
    not held by it (a process of its own)."""

    name = "network-policy"
    kind = Kind.READINESS

    def __init__(self, state: SharedState) -> None:
        self.state = state

    def run(self, now: float) -> Result:
        board = self.state.policies
        neutron = board.neutron_state()
        figures = board.read()
        pending = int(figures["policies_pending"] + figures["policies_failed"])
        if neutron == "down":
            return Result.failed("Neutron does not answer the NetworkPolicy "
                                 f"calls: {pending} NetworkPolicies wait")
        if neutron == "refusing":
            return Result.failed(
                "Neutron refuses what NetworkPolicies need (a quota met or a "
                f"conflict): {int(figures['policies_failed'])} failed, see "
                "their PolicyFailed Events")
        return Result.passed(f"{int(figures['policies_applied'])} "
                             f"NetworkPolicies applied, {pending} pending")


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
        HandlersSyncedCheck(state),
        NeutronPortsCheck(state, conf),
        DrainingCheck(state),
        *([NetworkPolicyCheck(state)] if any(
            c.handler == "network_policy" for c in state.active) else []),
        *extra,
    ]

