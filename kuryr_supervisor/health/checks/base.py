"""What every health check is: a name, a kind, a sort, and ``run(now)``.

A check is a small object whose inputs (proc root, cgroup root, process
factory, the shared state, the configuration) are injected with production
defaults, so tests drive it with fixture trees instead of patching.

Invariants:

- ``run(now)`` returns a :class:`Result`; it may raise, and the aggregator then
  reports the check failed with the exception text (a check never crashes the
  HealthManager).
- ``now`` is the shared state's monotonic clock, read once per evaluation, so
  every check of one evaluation sees the same instant.
- An :attr:`Sort.IO` check touches the system (files, sockets, netlink) and
  runs only on the HealthManager's timer, on a thread of its own
  (:mod:`kuryr_supervisor.health.runner`): a run longer than
  :meth:`Check.timeout` (``[health] check_timeout`` when it returns None)
  is the check failing, named, and is not started again while it goes on;
  a :attr:`Sort.SHARED` check reads shared memory only and is evaluated on
  every probe request.
- Option values are read from the ``ConfigOpts`` on every run, never cached,
  so a SIGHUP reload takes effect without a restart.
"""
from __future__ import annotations

import abc
import dataclasses
import enum

from kuryr_supervisor.state import LiveCause


class Kind(enum.Enum):
    """Which probe a check vouches for."""

    LIVENESS = "liveness"
    READINESS = "readiness"


class Sort(enum.Enum):
    """When a check runs: on the timer (I/O) or at request time (shared)."""

    IO = "io"
    SHARED = "shared"


@dataclasses.dataclass(frozen=True)
class Result:
    """The outcome of one run: ok or failed, a human message, and optionally
    the figure measured (exported as a metric, e.g. daemon memory bytes).

    ``shared``: the failure's cause is one every node typically meets at
    once (a dependency they all share: ovn-controller off the Southbound
    database), so CNI STATUS waits a moment for the network judge's
    verdict before failing for it (:mod:`kuryr_supervisor.
    netcheck.node.statushold`)."""

    ok: bool
    message: str
    value: float | None = None
    shared: bool = False

    @classmethod
    def passed(cls, message: str = "ok", value: float | None = None) -> Result:
        return cls(True, message, value)

    @classmethod
    def failed(cls, message: str, value: float | None = None, *,
               shared: bool = False) -> Result:
        return cls(False, message, value, shared)


class Check(abc.ABC):
    """Base of every check; subclasses set the class attributes and ``run``."""

    name: str
    kind: Kind
    sort: Sort = Sort.SHARED
    #: For liveness checks: the cause published when this check fails first.
    cause: LiveCause = LiveCause.NONE

    @abc.abstractmethod
    def run(self, now: float) -> Result:
        """Evaluate the check at monotonic time ``now``."""

    def timeout(self) -> float | None:
        """Seconds an I/O run may take before it counts as failed; None:
        ``[health] check_timeout``. A check whose dependency has its own
        bound (an option) returns that bound."""
        return None

    def meanwhile(self) -> Result | None:
        """What an I/O check's view says until its next run, when its last
        result is known wrong already (another call failed on what this
        check watches); None: the last result stands."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.kind.value}>"
