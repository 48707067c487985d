"""The services handler's figures in shared memory, for ``/metrics``.

The ``services`` handler process alone writes here (gauges after each
reconciliation, counters as it writes); the HealthManager reads. Fixed
fields, so the series are bounded whatever the cluster: the cluster's
load balancers by provisioning status, its Services by what the handler
makes of them, the writes made to Octavia by kind, and the refusals.
Counters live in the master's shared memory: they outlive a restart of
the handler. Single writer, no lock: a gauge read half updated is one
scrape's blur.
"""
from __future__ import annotations

import multiprocessing.context
from typing import Any

#: Load balancers by provisioning status (gauges).
STATES = ("active", "pending", "error", "other")
#: Services: with a load balancer wanted, waiting for a change, making
#: none (headless, ExternalName, no IPv4) (gauges).
SERVICES = ("wanted", "pending", "skipped")
#: Writes to Octavia by kind (counters).
WRITES = ("create", "delete", "listener", "pool", "members")
FIELDS = (*(f"lb_{s}" for s in STATES), *(f"services_{s}" for s in SERVICES),
          *(f"writes_{w}" for w in WRITES), "refusals", "errors")


class LoadBalancerBoard:
    """Named access to the figures (see the module)."""

    def __init__(self, figures: Any = None) -> None:
        self._fig = [0.0] * len(FIELDS) if figures is None else figures

    @classmethod
    def create(cls, ctx: multiprocessing.context.BaseContext
               ) -> LoadBalancerBoard:
        return cls(ctx.RawArray("d", len(FIELDS)))

    def gauges(self, states: dict[str, int], services: dict[str, int]) -> None:
        """The load balancers by status, the Services by kind."""
        for name in STATES:
            self._fig[FIELDS.index(f"lb_{name}")] = float(states.get(name, 0))
        for name in SERVICES:
            self._fig[FIELDS.index(f"services_{name}")] = float(
                services.get(name, 0))

    def wrote(self, kind: str) -> None:
        """One write of ``kind`` (:data:`WRITES`) went to Octavia."""
        if kind in WRITES:
            self._fig[FIELDS.index(f"writes_{kind}")] += 1

    def count(self, name: str) -> None:
        """One more ``refusals`` or ``errors`` (a load balancer seen in
        ERROR)."""
        self._fig[FIELDS.index(name)] += 1

    def read(self) -> dict[str, float]:
        return {name: float(self._fig[i]) for i, name in enumerate(FIELDS)}
