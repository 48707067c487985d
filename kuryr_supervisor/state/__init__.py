"""Health state shared by the master and its workers.

Every primitive is created once, by :meth:`SharedState.create`, from the one
``fork`` multiprocessing context the master uses; workers inherit it across
``fork`` and use it only through the named methods below.

Invariant: every field has exactly one writing process (a worker writes its own
slot, each handler process its own failure count included, and the globals it
owns; the master writes death, restart and budget
fields; the HealthManager writes the overall verdict and memory figures).
Fields are aligned 8-byte doubles in a raw shared array, so a single store is
atomic and no cross-process lock exists that a SIGKILLed holder could leave
taken. Read-modify-write within one process is guarded by a thread lock.

Parts: :mod:`.components` (workers and their slots), :mod:`.verdict` (live
causes, faults, the overall verdict), :mod:`.counters` (the metric block),
the boards of one writer each (:mod:`.poolstats`, :mod:`.creates`,
:mod:`.cnistatus`: what CNI STATUS answers, :mod:`.netverdicts`: the
network judge's verdicts, :mod:`.lostports`: the pods whose port is lost,
:mod:`.lbstats`: the services handler's load balancers,
:mod:`.policystats`: the network_policy handler's policies) and
:mod:`.shared` (:class:`SharedState` itself).
"""
from kuryr_supervisor.state.cnistatus import Cause as StatusCause
from kuryr_supervisor.state.components import (
    CNI_COMPONENTS,
    MAX_HANDLERS,
    Component,
    ComponentStatus,
    Reason,
    WorkerKind,
    controller_components,
)
from kuryr_supervisor.state.counters import (
    CNI_CODES,
    CNI_COMMANDS,
    LATENCY_BUCKETS,
    RESTART_CAUSES,
    TIMED_COMMANDS,
    WATCH_ERRORS,
)
from kuryr_supervisor.state.shared import ALL_SECTIONS, Clock, Section, SharedState
from kuryr_supervisor.state.verdict import Fault, LiveCause, Mode, Overall

__all__ = [
    "ALL_SECTIONS", "CNI_CODES", "CNI_COMMANDS", "CNI_COMPONENTS", "Clock", "Component",
    "ComponentStatus", "Fault", "LATENCY_BUCKETS", "LiveCause", "MAX_HANDLERS",
    "Mode", "Overall", "RESTART_CAUSES", "Reason", "Section", "SharedState", "StatusCause",
    "TIMED_COMMANDS",
    "WATCH_ERRORS", "WorkerKind", "controller_components",
]
