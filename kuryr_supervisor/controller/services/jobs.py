"""A job of the services handler's workers, and what comes of it
(:mod:`.work` runs them, :mod:`.reconcile` hands them out and takes
their outcomes)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from kuryr_supervisor.controller.openstack.wire import OpenStackError
from kuryr_supervisor.controller.services.desired import Wanted
from kuryr_supervisor.controller.services.plan import Actual


class VipHeld(OpenStackError):
    """The VIP is held by a load balancer of this cluster for a Service
    that is gone: it is being (or will be) deleted; try again later."""


class StillFailing(OpenStackError):
    """A load balancer made again after it was found in ERROR went ERROR
    again: the cause is not gone; try again later."""


class Leave:
    """What a job's ``want`` says of a Service it may not touch now (gone
    from the book, not proven gone): leave its load balancer alone."""


LEAVE = Leave()


@dataclasses.dataclass(frozen=True)
class Job:
    uid: str
    #: What the Service asks now (read afresh before each write: the
    #: whole current difference), None for nothing, or :data:`LEAVE`.
    want: Callable[[], Wanted | None | Leave]
    actual: Actual | None
    #: The members of ``actual``'s pools are known.
    complete: bool


@dataclasses.dataclass(frozen=True)
class Outcome:
    uid: str
    actual: Actual | None
    #: ``actual`` is what the Service asks.
    done: bool = False
    #: ``actual``'s members are known; pool id -> member ids, when a
    #: status tree said them.
    complete: bool = True
    ids: Mapping[str, frozenset[str]] | None = None
    #: The writes made, by kind (create, delete, listener, pool, members).
    writes: tuple[str, ...] = ()
    #: A load balancer created (its id), or found in ERROR (remade).
    created: str = ""
    errored: str = ""
    #: The load balancer stayed pending past the settle timeout.
    stuck: bool = False
    error: Exception | None = None
