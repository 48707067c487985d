"""What a controller handler is, and how handlers are found.

Handlers are plugins: entry points in the group
``kuryr_supervisor.controller.handlers`` (loaded with stevedore, the OpenStack
way), named in ``[controller] handlers``. A deployment adds its own by
installing a package that declares one. Each entry point is the handler's
build function: a callable taking the process's
:class:`~.runtime.Runtime` (its clients, its informer, its hooks) and
returning a :class:`Handler`, every collaborator passed to the handler's
constructor. Each handler runs in a process of its own (slot
``handler:<name>``) whose liveness is the handler's heartbeat.

Contract of ``Handler.run(stopping, beat)``: do the work until ``stopping`` is
set; call ``beat()`` from the working loop at least every ``[supervisor]
heartbeat_interval`` (a handler that stops beating is stale and gets
restarted; :meth:`~.runtime.Runtime.running` lends that beat to the
collaborators built before); call ``runtime.ready(True)`` once it has caught
up (first list: the runtime's informer does); report each failed step with
``runtime.failed()`` and each successful one with ``runtime.succeeded()``
(each handler's own consecutive count is held against the liveness budget
``[controller] handler_failures_count``: one handler's success never hides
another's failures). An outage of a dependency is not a failure of the
handler: readiness reports those.

Contract of ``Handler.finish(timeout)``: called on SIGTERM once
``stopping`` is set, it waits at most ``timeout`` seconds for the work
``run`` still has for a graceful stop (the network judge releasing its
Node conditions when uninstalling: :meth:`~.runtime.Runtime.finish`); a
handler with nothing to finish returns at once.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

from kuryr_supervisor.controller.runtime import (  # noqa: F401 - re-exported
    HandlerContext,
    Runtime,
)

NAMESPACE = "kuryr_supervisor.controller.handlers"


class Handler(Protocol):
    def run(self, stopping: threading.Event,
            beat: Callable[[], None]) -> None: ...

    def finish(self, timeout: float) -> None: ...


#: A handler's build function (its entry point).
HandlerFactory = Callable[[Runtime], Handler]


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
