"""Which worker processes a daemon runs, and how a slot describes one.

A :class:`Component` names a worker and its slot in shared memory; the CNI
role's three have fixed slots, the controller role's handlers one each of
:data:`MAX_HANDLERS` reserved slots. :class:`ComponentStatus` is a copy of
one slot as read at one instant.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import ClassVar


class WorkerKind(enum.Enum):
    """What a worker process does; deadlines and policies go by kind."""

    WATCHER = "watcher"
    SERVER = "server"
    HEALTH = "health"
    HANDLER = "handler"      # the controller role: one process per handler


@dataclasses.dataclass(frozen=True)
class Component:
    """One worker process: its slot in shared memory, its kind, its name.

    The CNI role's workers and the HealthManager have a fixed slot each
    (``Component.WATCHER``, ``.SERVER``, ``.HEALTH``). The controller role
    runs one process per configured handler, each in one of
    :data:`MAX_HANDLERS` slots reserved in every daemon (shared memory is
    sized once, before forking, whatever the role), named
    ``handler:<entry point name>`` in probes, metrics and ``/status``.
    """

    slot: int
    kind: WorkerKind
    handler: str = ""        # the handler's entry point name (HANDLER only)

    WATCHER: ClassVar[Component]
    SERVER: ClassVar[Component]
    HEALTH: ClassVar[Component]

    @property
    def label(self) -> str:
        return f"{self.kind.value}:{self.handler}" if self.handler \
            else self.kind.value


Component.WATCHER = Component(0, WorkerKind.WATCHER)
Component.SERVER = Component(1, WorkerKind.SERVER)
Component.HEALTH = Component(2, WorkerKind.HEALTH)

#: Handler processes the controller role can run (``[controller] handlers``
#: is refused with exit 78 beyond it): their slots are reserved up front.
MAX_HANDLERS = 8
_FIRST_HANDLER_SLOT = 3
SLOTS = _FIRST_HANDLER_SLOT + MAX_HANDLERS

#: The workers of the CNI role (``--role cni``); a role's slots are the only
#: ones probes, metrics and the supervisor look at.
CNI_COMPONENTS = (Component.WATCHER, Component.SERVER, Component.HEALTH)


def controller_components(handlers: Sequence[str]) -> tuple[Component, ...]:
    """The controller role's workers: one per handler, then the HealthManager."""
    if len(handlers) > MAX_HANDLERS:
        raise ValueError(f"{len(handlers)} handlers, at most {MAX_HANDLERS}")
    return (*(Component(_FIRST_HANDLER_SLOT + i, WorkerKind.HANDLER, name)
              for i, name in enumerate(handlers)), Component.HEALTH)


class Reason(enum.IntEnum):
    """Why a component is in its current state (the slot's reason code)."""

    OK = 0
    NOT_STARTED = 1
    EXITED = 2       # exited on its own, see exit_code
    KILLED = 3       # killed by a signal, see exit_code (negative signal number)
    STALE = 4        # stopped heartbeating and was killed by the supervisor
    MEMORY = 5       # restarted for passing max_worker_memory
    STOPPING = 6     # terminating as part of a shutdown


@dataclasses.dataclass(frozen=True)
class ComponentStatus:
    """A consistent-enough copy of one component's slot."""

    component: Component
    alive: bool
    ready: bool
    heartbeat: float      # monotonic time of the last heartbeat (0: never)
    pid: int
    restarts: int
    reason: Reason
    started: float        # monotonic time the current process registered
    exit_code: int        # last exit status (negative: killed by that signal)
    memory: int           # USS in bytes, as last measured by the HealthManager

    def heartbeat_age(self, now: float) -> float:
        return now - self.heartbeat if self.heartbeat else float("inf")
