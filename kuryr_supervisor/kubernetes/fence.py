"""The write fence of a controller replica that leads through a Lease.

A leader that lost its Lease must not write: the new leader acts on the
same pods and ports. The lease thread notices a lost Lease only at its next
renewal, and a process paused past its lease (SIGSTOP, a frozen VM, a long
GC) resumes with every thread at once: its handler may send the write it
was about to send before the lease thread runs. So every write that steers
pods (a Neutron port created, updated or deleted; a PodPort written or
deleted) first asks its :class:`WriteFence`, which needs no I/O: the lease
must have been renewed within its duration by this process's own clock. If
not, the process exits at once (status 1), as the lease thread does, and
the supervisor restarts it as a follower.

A fence is an object, built where the process is assembled and handed to
the clients that write (:class:`~.transport.K8sTransport`, the OpenStack
adapter): a handler process of a replica with ``[controller]
leader_election`` builds one over its elector
(:mod:`kuryr_supervisor.controller.leadership.election`); every other
client holds an open one (``WriteFence()``), which allows everything.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable

LOG = logging.getLogger(__name__)


class WriteFence:
    """Writes need ``leading()`` to be true (None: an open fence, never
    closed); ``left()``: seconds until it closes, by this process's clock,
    if not renewed meanwhile (the lease's end). Immutable: what a fence
    checks is fixed when it is built."""

    __slots__ = ("_leading", "_left")

    def __init__(self, leading: Callable[[], bool] | None = None,
                 left: Callable[[], float] | None = None) -> None:
        self._leading = leading
        self._left = left

    @property
    def closes(self) -> bool:
        """Whether this fence can refuse a write (it has a lease to ask)."""
        return self._leading is not None

    def left(self) -> float:
        """Seconds a write may still leave this process, at most (the
        fence's end): 0 for an open fence (its process's own end is what
        ends its writes, and its successor starts after it)."""
        return max(0.0, self._left()) if self._left is not None else 0.0

    def allows(self) -> bool:
        """Whether a write may be sent now."""
        return self._leading is None or self._leading()

    def check(self, what: str) -> None:
        """Exit the process (status 1) unless it may write (see the module)."""
        if not self.allows():
            LOG.error("%s refused: this replica no longer holds the controller "
                      "lease; handlers stop now", what)
            logging.shutdown()
            os._exit(1)
