"""Leader election on a coordination.k8s.io/v1 Lease, as client-go does it.

A candidate holds the lease while it renews it within ``duration`` seconds;
another takes it over only once the holder's last renewal is older than
that. Every write carries the resourceVersion read, so of two candidates
racing for an expired lease exactly one wins (the other gets 409). Used by
the controller role when it runs more than one replica: followers wait,
beating, and only the leader's handlers act.

A lease held by another runs out, as client-go judges it, ``duration``
seconds after this process last saw its record change (its holder,
``renewTime`` or version), on this process's monotonic clock: the holder's
``renewTime`` is written on the holder's clock, and a skew between the two
hosts neither lets a candidate take a live lease (a holder whose clock
lags) nor makes it wait past the holder's death (one whose clock runs
ahead). A candidate that has just started waits a whole ``duration`` from
its first look. The holder's own lease (:meth:`LeaderElector.leading`,
:meth:`LeaderElector.left`) is judged from its last successful renewal on
its own clock.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kuryr_supervisor.kubernetes.client import K8sClient
from kuryr_supervisor.kubernetes.leases import read_lease, write_lease
from kuryr_supervisor.kubernetes.wire import K8sError

LOG = logging.getLogger(__name__)


class LeaderElector:
    def __init__(self, client: K8sClient, *, namespace: str, name: str,
                 identity: str, duration: int,
                 clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.namespace, self.name = namespace, name
        self.identity, self.duration = identity, duration
        self._clock = clock
        self._monotonic = monotonic
        self.renewed_at = 0.0          # last successful renewal (our clock)
        self._leading = False
        #: Another holder's record as last seen, and when (monotonic).
        self._seen: tuple[str, float, str] | None = None
        self._seen_at = 0.0

    @property
    def retry_period(self) -> float:
        """How often the holder renews: three times within its lease."""
        return max(0.2, self.duration / 3)

    @property
    def acquire_period(self) -> float:
        """How often a candidate asks. It leads at most this long after
        the lease ran out, so at most 1 s, whatever the duration (a third
        of the default 15 s would add 5 s to every handover)."""
        return min(self.retry_period, 1.0)

    def leading(self) -> bool:
        """Still the leader: renewed within the lease duration."""
        return self._leading and self._clock() - self.renewed_at < self.duration

    def left(self) -> float:
        """Seconds this holder's lease has left by its own clock, unless
        renewed meanwhile (0 when not leading): until then a write of its
        may still leave."""
        if not self._leading:
            return 0.0
        return max(0.0, self.renewed_at + self.duration - self._clock())

    def _expired(self, holder: str, renewed: float, version: str,
                 duration: float) -> bool:
        """Whether another's lease ran out: ``duration`` after this process
        last saw its record change (see the module)."""
        now = self._monotonic()
        record = (holder, renewed, version)
        if record != self._seen:
            self._seen, self._seen_at = record, now
        return now - self._seen_at >= duration

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this candidate holds the lease now."""
        now = self._clock()
        try:
            lease = read_lease(self.client.leases, self.namespace, self.name)
            if lease is None:
                write_lease(
                    self.client.leases, self.namespace, self.name, holder=self.identity,
                    duration=self.duration, transitions=0, acquired=True,
                    resource_version=None, renewed=now)
            elif lease.holder == self.identity:
                write_lease(
                    self.client.leases, self.namespace, self.name, holder=self.identity,
                    duration=self.duration, transitions=lease.transitions,
                    acquired=False, resource_version=lease.resource_version,
                    renewed=now)
            elif lease.holder and not self._expired(
                    lease.holder, lease.renew_time, lease.resource_version,
                    lease.duration or self.duration):
                return self._set(False, f"held by {lease.holder}")
            else:
                write_lease(
                    self.client.leases, self.namespace, self.name, holder=self.identity,
                    duration=self.duration, transitions=lease.transitions + 1,
                    acquired=True, resource_version=lease.resource_version,
                    renewed=now)
        except K8sError as exc:
            # 409: another candidate wrote first. Anything else: API trouble;
            # a leader keeps leading until its lease runs out.
            LOG.debug("lease %s/%s: %s", self.namespace, self.name, exc)
            return self.leading()
        self.renewed_at = now
        return self._set(True, "acquired")

    def _set(self, leading: bool, why: str) -> bool:
        if leading != self._leading:
            LOG.info("lease %s/%s: %s %s (%s)", self.namespace, self.name,
                     self.identity, "leads" if leading else "follows", why)
        self._leading = leading
        return leading
