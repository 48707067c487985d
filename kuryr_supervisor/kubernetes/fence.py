"""The write fence of a controller replica that leads through a Lease.

A leader that lost its Lease must not write: the new leader acts on the
same pods and ports. The lease thread notices a lost Lease only at its next
renewal, and a process paused past its lease (SIGSTOP, a frozen VM, a long
GC) resumes with every thread at once: its handler may send the write it
was about to send before the lease thread runs. So every write that steers
pods (a Neutron port created, updated or deleted; a PodPort written or
deleted) first asks :func:`check`, which needs no I/O: the lease must have
been renewed within its duration by this process's own clock. If not, the
process exits at once (status 1), as the lease thread does, and the
supervisor restarts it as a follower.

Armed only in a handler process of a replica with ``[controller]
leader_election`` (:mod:`kuryr_supervisor.controller.leadership.election`); elsewhere
:func:`check` allows everything.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable

LOG = logging.getLogger(__name__)

_leading: Callable[[], bool] | None = None


def arm(leading: Callable[[], bool] | None) -> None:
    """Writes need ``leading()`` to be true from now on (None: disarm)."""
    global _leading
    _leading = leading


def check(what: str) -> None:
    """Exit the process (status 1) unless it may write (see the module)."""
    if _leading is not None and not _leading():
        LOG.error("%s refused: this replica no longer holds the controller "
                  "lease; handlers stop now", what)
        logging.shutdown()
        os._exit(1)
