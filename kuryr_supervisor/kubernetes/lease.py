"""Leader election on a coordination.k8s.io/v1 Lease, as client-go does it.

A candidate holds the lease while it renews it within ``duration`` seconds;
another takes it over only once the holder's last renewal is older than
that. Every write carries the resourceVersion read, so of two candidates
racing for an expired lease exactly one wins (the other gets 409). Used by
the controller role when it runs more than one replica: followers wait,
beating, and only the leader's handlers act.

Times compare the holder's ``renewTime`` with this host's clock, as
client-go does; keep the nodes' clocks in step (NTP), and ``duration`` well
above the skew.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kuryr_supervisor.kubernetes.client import K8sClient
from kuryr_supervisor.kubernetes.wire import K8sError

LOG = logging.getLogger(__name__)


class LeaderElector:
    def __init__(self, client: K8sClient, *, namespace: str, name: str,
                 identity: str, duration: int,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.namespace, self.name = namespace, name
        self.identity, self.duration = identity, duration
        self._clock = clock
        self.renewed_at = 0.0          # last successful renewal (our clock)
        self._leading = False

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

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this candidate holds the lease now."""
        now = self._clock()
        try:
            lease = self.client.read_lease(self.namespace, self.name)
            if lease is None:
                self.client.write_lease(
                    self.namespace, self.name, holder=self.identity,
                    duration=self.duration, transitions=0, acquired=True,
                    resource_version=None)
            elif lease.holder == self.identity:
                self.client.write_lease(
                    self.namespace, self.name, holder=self.identity,
                    duration=self.duration, transitions=lease.transitions,
                    acquired=False, resource_version=lease.resource_version)
            elif lease.holder and now - lease.renew_time < (lease.duration
                                                            or self.duration):
                return self._set(False, f"held by {lease.holder}")
            else:
                self.client.write_lease(
                    self.namespace, self.name, holder=self.identity,
                    duration=self.duration, transitions=lease.transitions + 1,
                    acquired=True, resource_version=lease.resource_version)
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
