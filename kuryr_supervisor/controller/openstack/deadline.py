"""Calls to OpenStack under a whole-call deadline, the caller beating.

A keystoneauth session bounds each socket operation, but one public call can
chain several (version discovery, a token request, the Neutron request), and
a dependency that trickles bytes never trips a per-operation timeout. So
every public call of the adapter runs in a thread of the adapter's under a
whole-call ``deadline`` while the caller's thread keeps calling ``beat`` (a
handler's or the HealthManager's heartbeat): a hung Keystone never makes a
worker stale.

One call path per service (:class:`CallPath`: one thread and what hangs in
it): Neutron's calls run on the adapter's default path, Keystone's on a
path of its own (``_bounded(..., via=...)``), so a hung Neutron never
fails a token request as "an earlier call still hangs", and the
Keystone check names Keystone only when Keystone is the one hanging.

Invariants: one thread per path; while a call that overran its deadline
still hangs on a path, later calls on that path fail at once as
:class:`OpenStackUnavailable` (the dependency is known to hang) instead of
queueing behind it; a call never waits more than ``deadline`` seconds, nor
``beat`` goes uncalled for more than :data:`BEAT_EVERY`.
"""
from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kuryr_supervisor.controller.openstack.wire import OpenStackUnavailable

#: How often a caller waiting on a call beats (seconds).
BEAT_EVERY = 0.2

T = TypeVar("T")


def _still() -> None:
    """No heartbeat to keep: the caller is no worker."""


class CallPath:
    """One service's thread and the call that overran its deadline there;
    ``error`` is what a call that cannot be answered raises (a subclass
    naming the service, e.g. Keystone's)."""

    def __init__(self, name: str, error: type[OpenStackUnavailable]
                 = OpenStackUnavailable) -> None:
        self.name = name
        self.error = error
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=name)
        self.hung: concurrent.futures.Future[Any] | None = None
        #: The deadline the hung call overran (seconds).
        self.overran = 0.0

    def submit(self, what: str, fn: Callable[..., T], *args: Any,
               **kwargs: Any) -> concurrent.futures.Future[T]:
        if self.hung is not None and not self.hung.done():
            # The same words as the call that overran: one phrase for one
            # fault, whichever call meets it first.
            raise self.error(f"{what}: no answer within {self.overran:g}s "
                             "(an earlier call still hangs)")
        self.hung = None
        return self._pool.submit(fn, *args, **kwargs)

    def overrun(self, future: concurrent.futures.Future[Any], what: str,
                deadline: float) -> OpenStackUnavailable:
        """``future``, the call ``what``, overran ``deadline``: later calls
        fail at once while it hangs; the error to raise."""
        self.hung, self.overran = future, deadline
        return self.error(f"{what}: no answer within {deadline:g}s")


class BoundedCalls:
    """The adapter's call paths, its deadline and its caller's beat."""

    def __init__(self, deadline: float, *,
                 thread_name: str = "openstack",
                 beat: Callable[[], None] | None = None) -> None:
        #: Whole-call bound (discovery + token + request), seconds.
        self.deadline = deadline
        #: Called while a call waits: the caller's heartbeat.
        self.beat: Callable[[], None] = beat or _still
        self._path = CallPath(thread_name)

    def _bounded(self, what: str, fn: Callable[..., T], *args: Any,
                 via: CallPath | None = None, **kwargs: Any) -> T:
        """``fn`` on ``via`` (default: the adapter's own), within
        ``deadline``, beating. While a call that timed out still hangs on
        that path, later calls there fail at once (the dependency is known
        to hang) instead of queueing behind it."""
        path = via or self._path
        future = path.submit(what, fn, *args, **kwargs)
        end = time.monotonic() + self.deadline
        while True:
            self.beat()
            left = end - time.monotonic()
            try:
                return future.result(timeout=max(0.0, min(BEAT_EVERY, left)))
            except concurrent.futures.TimeoutError:
                if left <= BEAT_EVERY:
                    raise path.overrun(future, what, self.deadline) from None
