"""Calls to OpenStack under a whole-call deadline, the caller beating.

A keystoneauth session bounds each socket operation, but one public call can
chain several (version discovery, a token request, the Neutron request), and
a dependency that trickles bytes never trips a per-operation timeout. So
every public call of the adapter runs in the adapter's own thread under a
whole-call ``deadline`` while the caller's thread keeps calling ``beat`` (a
handler's or the HealthManager's heartbeat): a hung Keystone never makes a
worker stale.

Invariants: one thread per adapter; while a call that overran its deadline
still hangs there, later calls fail at once as :class:`OpenStackUnavailable`
(the dependency is known to hang) instead of queueing behind it; a call
never waits more than ``deadline`` seconds, nor ``beat`` goes uncalled for
more than :data:`BEAT_EVERY`.
"""
from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kuryr_supervisor.controller.neutronwire import OpenStackUnavailable

#: How often a caller waiting on a call beats (seconds).
BEAT_EVERY = 0.2

T = TypeVar("T")


class BoundedCalls:
    """The adapter's thread, its deadline and its caller's beat."""

    def __init__(self, deadline: float, *,
                 thread_name: str = "openstack") -> None:
        #: Whole-call bound (discovery + token + request), seconds.
        self.deadline = deadline
        #: Called while a call waits; a worker sets its heartbeat here.
        self.beat: Callable[[], None] = lambda: None
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=thread_name)
        self._hung: concurrent.futures.Future[Any] | None = None

    def _bounded(self, what: str, fn: Callable[..., T], *args: Any,
                 **kwargs: Any) -> T:
        """``fn`` in the adapter's thread, within ``deadline``, beating.
        One thread: while a call that timed out still hangs there, later
        calls fail at once (the dependency is known to hang) instead of
        queueing behind it."""
        if self._hung is not None and not self._hung.done():
            raise OpenStackUnavailable(f"{what}: an earlier call still has "
                                       f"no answer")
        self._hung = None
        future = self._pool.submit(fn, *args, **kwargs)
        end = time.monotonic() + self.deadline
        while True:
            self.beat()
            left = end - time.monotonic()
            try:
                return future.result(timeout=max(0.0, min(BEAT_EVERY, left)))
            except concurrent.futures.TimeoutError:
                if left <= BEAT_EVERY:
                    self._hung = future
                    raise OpenStackUnavailable(
                        f"{what}: no answer within {self.deadline:g}s") from None
