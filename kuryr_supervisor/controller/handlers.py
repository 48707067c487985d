"""What a controller handler is, and how handlers are found.

Handlers are plugins: entry points in the group
``kuryr_supervisor.controller.handlers`` (loaded with stevedore, the OpenStack
way), named in ``[controller] handlers``. A deployment adds its own by
installing a package that declares one. Each entry point is a callable taking
a :class:`HandlerContext` and returning a :class:`Handler`; the handler worker
runs it and takes its heartbeats as the worker's liveness.

Contract of ``Handler.run(stopping, beat)``: do the work until ``stopping`` is
set; call ``beat()`` from the working loop at least every ``[supervisor]
heartbeat_interval`` (a handler that stops beating is stale and gets
restarted); call ``ctx.ready(True)`` once it has caught up (first list);
report each failed step with ``ctx.failed()`` and each successful one with
``ctx.succeeded()`` (the consecutive count is the liveness budget
``[controller] handler_failures_count``). An outage of a dependency is not a
failure of the handler: readiness reports those.
"""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

from oslo_config import cfg

from kuryr_supervisor.state import SharedState

NAMESPACE = "kuryr_supervisor.controller.handlers"


@dataclasses.dataclass(frozen=True)
class HandlerContext:
    conf: cfg.ConfigOpts
    state: SharedState | None
    ready: Callable[[bool], None]

    def failed(self) -> int:
        """Count one failed step; returns the consecutive count."""
        return self.state.record_handler_failure() if self.state else 0

    def succeeded(self) -> None:
        if self.state is not None:
            self.state.record_handler_success()


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


def _load_failed(manager: object, entrypoint: object,
                 exc: BaseException) -> None:
    raise HandlerNotFound(f"handler {entrypoint} cannot be loaded: {exc}") from exc
