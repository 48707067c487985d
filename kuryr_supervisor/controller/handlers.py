"""What a controller handler is, and how handlers are found.

Handlers are plugins: entry points in the group
``kuryr_supervisor.controller.handlers`` (loaded with stevedore, the OpenStack
way), named in ``[controller] handlers``. A deployment adds its own by
installing a package that declares one. Each entry point is a callable taking
a :class:`HandlerContext` and returning a :class:`Handler`; each handler runs
in a process of its own (slot ``handler:<name>``) whose liveness is the
handler's heartbeat.

Contract of ``Handler.run(stopping, beat)``: do the work until ``stopping`` is
set; call ``beat()`` from the working loop at least every ``[supervisor]
heartbeat_interval`` (a handler that stops beating is stale and gets
restarted); call ``ctx.ready(True)`` once it has caught up (first list);
report each failed step with ``ctx.failed()`` and each successful one with
``ctx.succeeded()`` (each handler's own consecutive count is held against
the liveness budget ``[controller] handler_failures_count``: one handler's
success never hides another's failures). An outage of a dependency is not a
failure of the handler: readiness reports those.

What a handler process hands its handler, besides the options and the
shared state, is built once, where the process is assembled
(:mod:`kuryr_supervisor.workers.handler`), and passed in the context,
never armed in a module: ``fence``, the write fence every client that
writes must ask (closed once the replica lost its Lease; open without
leader election), ``announcer``, where writes whose outcome may
outlive the process (Neutron port creates) are announced to its successor
(:mod:`~kuryr_supervisor.controller.leadership.announcer`), and
``master_pid``, the replica's master: its clients name it in their
User-Agent and its Lease identity
(:func:`~kuryr_supervisor.controller.leadership.election.identity`) holds it.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

from oslo_config import cfg

from kuryr_supervisor.controller.leadership.announcer import Announcer
from kuryr_supervisor.kubernetes.fence import WriteFence
from kuryr_supervisor.state import Component, SharedState

NAMESPACE = "kuryr_supervisor.controller.handlers"


@dataclasses.dataclass(frozen=True)
class HandlerContext:
    conf: cfg.ConfigOpts
    state: SharedState | None
    ready: Callable[[bool], None]
    #: The handler's own slot (None outside a daemon: nothing is counted).
    component: Component | None = None
    #: What every write asks first (see the module); open by default.
    fence: WriteFence = dataclasses.field(default_factory=WriteFence)
    #: Where port creates are announced (None: nowhere, outside a daemon).
    announcer: Announcer | None = None
    #: The replica's master (outside a daemon, this process: its own).
    master_pid: int = dataclasses.field(default_factory=os.getpid)

    def failed(self) -> int:
        """Count one failed step; returns the consecutive count."""
        if self.state is None or self.component is None:
            return 0
        return self.state.record_handler_failure(self.component)

    def succeeded(self) -> None:
        if self.state is not None and self.component is not None:
            self.state.record_handler_success(self.component)


class Handler(Protocol):
    def run(self, stopping: threading.Event,
            beat: Callable[[], None]) -> None: ...


HandlerFactory = Callable[[HandlerContext], Handler]


class HandlerNotFound(Exception):
    """A name in [controller] handlers has no entry point."""


def load(names: Sequence[str]) -> list[tuple[str, HandlerFactory]]:
    """The factories of ``names``, in that order, from the entry points."""
    from stevedore import named

    missing: list[str] = []
    manager: named.NamedExtensionManager[Any] = named.NamedExtensionManager(
        NAMESPACE, names=list(names), invoke_on_load=False, name_order=True,
        on_missing_entrypoints_callback=missing.extend,
        on_load_failure_callback=_load_failed)
    if missing:
        raise HandlerNotFound(f"no handler entry point named "
                              f"{', '.join(sorted(missing))} in {NAMESPACE}")
    return [(ext.name, cast(HandlerFactory, ext.plugin)) for ext in manager]


def missing(names: Sequence[str]) -> list[str]:
    """The names without an installed entry point (nothing is imported)."""
    from importlib.metadata import entry_points

    found = {ep.name for ep in entry_points(group=NAMESPACE)}
    return sorted(set(names) - found)


def _load_failed(manager: object, entrypoint: object,
                 exc: BaseException) -> None:
    raise HandlerNotFound(f"handler {entrypoint} cannot be loaded: {exc}") from exc
