"""Port pools' figures in shared memory, for ``/status`` and ``/metrics``.

The neutron_port handler process keeps the pools (it alone writes here);
the HealthManager reads. :data:`MAX_POOLS` rows, each a label (the pool
key, UTF-8, at most :data:`LABEL_BYTES`: ``network/subnet/project`` and,
for a node's pool, ``@node``) and its figures: free ports, ports being
made, hits (pods served from the pool), misses (pods that found it
empty), ports given back, the low- and high-water marks. Pools are per
node, so the rows (and the ``node`` label of the metrics) are bounded by
the cluster's nodes and by :data:`MAX_POOLS`: more pools than rows fold
into the last row (node ``other``, the sums of their figures).

Single writer, no lock: a reader may see one row half updated, which a
gauge read every few seconds tolerates; labels are written before the row
counts as used (``used`` last).
"""
from __future__ import annotations

import multiprocessing.context
from typing import Any

MAX_POOLS = 512
#: network, subnet and project ids (about 110 bytes) and a node name (a
#: DNS subdomain: at most 253).
LABEL_BYTES = 384
FIELDS = ("used", "free", "creating", "hits", "misses", "given_back",
          "low", "high")
_W = len(FIELDS)


class PoolBoard:
    """Named access to the rows (see the module)."""

    def __init__(self, figures: Any = None, labels: Any = None) -> None:
        self._fig = [0.0] * (MAX_POOLS * _W) if figures is None else figures
        self._labels = bytearray(MAX_POOLS * LABEL_BYTES) if labels is None \
            else labels

    @classmethod
    def create(cls, ctx: multiprocessing.context.BaseContext) -> PoolBoard:
        return cls(ctx.RawArray("d", MAX_POOLS * _W),
                   ctx.RawArray("c", MAX_POOLS * LABEL_BYTES))

    def publish(self, row: int, label: str, **figures: float) -> None:
        """Row ``row`` (folded into the last one past :data:`MAX_POOLS`)."""
        if row >= MAX_POOLS - 1 and row != MAX_POOLS - 1:
            row, label = MAX_POOLS - 1, "other"
        raw = label.encode()[:LABEL_BYTES].ljust(LABEL_BYTES, b"\0")
        self._labels[row * LABEL_BYTES:(row + 1) * LABEL_BYTES] = raw
        for name, value in figures.items():
            self._fig[row * _W + FIELDS.index(name)] = float(value)
        self._fig[row * _W] = 1.0

    def publish_all(self, rows: list[tuple[str, dict[str, float]]]) -> None:
        """Every pool at once: rows past the last fold into it (their
        figures summed, node ``other``); unused rows after them cleared."""
        if len(rows) > MAX_POOLS:
            tail = rows[MAX_POOLS - 1:]
            summed = {name: sum(r[1].get(name, 0.0) for r in tail)
                      for name in FIELDS[1:]}
            base = tail[0][0].rsplit("@", 1)[0]
            rows = rows[:MAX_POOLS - 1] + [(f"{base}@other", summed)]
        for row, (label, figures) in enumerate(rows):
            self.publish(row, label, **figures)
        self.trim(len(rows))

    def trim(self, used: int) -> None:
        """Rows from ``used`` on are unused (pools that went away)."""
        for row in range(used, MAX_POOLS):
            self._fig[row * _W] = 0.0

    def clear(self) -> None:
        for row in range(MAX_POOLS):
            self._fig[row * _W] = 0.0

    def rows(self) -> list[dict[str, Any]]:
        """Every used row: its pool (the key without its node), node ("":
        the unbound pool) and figures (ints)."""
        out = []
        for row in range(MAX_POOLS):
            if not self._fig[row * _W]:
                continue
            raw = bytes(self._labels[row * LABEL_BYTES:(row + 1) * LABEL_BYTES])
            label = raw.rstrip(b"\0").decode(errors="replace")
            pool, _, node = label.partition("@")
            entry: dict[str, Any] = {"pool": pool, "node": node}
            for i, name in enumerate(FIELDS[1:], start=1):
                entry[name] = int(self._fig[row * _W + i])
            out.append(entry)
        return out
