"""The network_policy handler's figures in shared memory, for ``/metrics``,
``/status`` (``kuryr-supervisor status``) and readiness.

The ``network_policy`` handler process alone writes here (gauges after
each pass, counters as it writes); the HealthManager reads. Fixed fields,
so the series are bounded whatever the cluster: the NetworkPolicies by
state (applied, pending, failed), the writes made to Neutron by kind,
Neutron's refusals, and Neutron's state as the handler last saw it
(:data:`NEUTRON`: answering, not answering, refusing), which readiness
names. Counters live in the master's shared memory: they outlive a
restart of the handler. Single writer, no lock: a gauge read half updated
is one scrape's blur.
"""
from __future__ import annotations

import multiprocessing.context
from typing import Any

#: NetworkPolicies by state (gauges).
STATES = ("applied", "pending", "failed")
#: Writes to Neutron by kind (counters).
WRITES = ("group", "rule", "address_group", "members", "port", "delete")
#: Neutron as the handler last saw it: answering, not answering (an
#: outage), refusing (a quota met, a conflict that persists).
NEUTRON = ("ok", "down", "refusing")
FIELDS = (*(f"policies_{s}" for s in STATES),
          *(f"writes_{w}" for w in WRITES), "refusals", "neutron", "active")


class PolicyBoard:
    """Named access to the figures (see the module)."""

    def __init__(self, figures: Any = None) -> None:
        self._fig = [0.0] * len(FIELDS) if figures is None else figures

    @classmethod
    def create(cls, ctx: multiprocessing.context.BaseContext) -> PolicyBoard:
        return cls(ctx.RawArray("d", len(FIELDS)))

    def gauges(self, states: dict[str, int]) -> None:
        """The NetworkPolicies by state (the handler runs: ``active``)."""
        for name in STATES:
            self._fig[FIELDS.index(f"policies_{name}")] = float(
                states.get(name, 0))
        self._fig[FIELDS.index("active")] = 1.0

    def wrote(self, kind: str, count: int = 1) -> None:
        """``count`` writes of ``kind`` (:data:`WRITES`) went to Neutron."""
        if kind in WRITES:
            self._fig[FIELDS.index(f"writes_{kind}")] += count

    def refused(self) -> None:
        self._fig[FIELDS.index("refusals")] += 1

    def neutron(self, state: str) -> None:
        """Neutron's state (:data:`NEUTRON`) as the last pass saw it."""
        self._fig[FIELDS.index("neutron")] = float(NEUTRON.index(state))

    def neutron_state(self) -> str:
        value = int(self._fig[FIELDS.index("neutron")])
        return NEUTRON[value] if 0 <= value < len(NEUTRON) else "ok"

    def active(self) -> bool:
        """Whether the handler has told anything yet (a daemon without
        it reads an empty board)."""
        return bool(self._fig[FIELDS.index("active")])

    def read(self) -> dict[str, float]:
        return {name: float(self._fig[i]) for i, name in enumerate(FIELDS)}
