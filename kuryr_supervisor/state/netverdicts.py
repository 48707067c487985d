"""The network judge's verdicts in shared memory, for ``/metrics``.

The controller's ``network_health`` handler process judges (it alone
writes here); the HealthManager reads at scrape time. A header (is a
cluster-wide fault on, its kind, since when; nodes judged, in trouble,
healthy, in a local fault, suspect) and one row per node in a local fault
(its name, UTF-8 at most :data:`LABEL_BYTES`, and the index of its reason),
at most :data:`MAX_ROWS`: the ``node`` label of the metrics is bounded by
the nodes in a local fault, which the judge keeps to at most half of the
cluster (more is a cluster-wide fault), and by the rows.

Single writer, no lock: a scrape may see one row half written, which a
gauge read every few seconds tolerates; rows past the count are unused.
"""
from __future__ import annotations

import dataclasses
import multiprocessing.context
from collections.abc import Sequence
from typing import Any

MAX_ROWS = 256
LABEL_BYTES = 256
#: What a cluster-wide fault's trouble is most often (the ``kind`` label;
#: the judge says what each most likely means).
KINDS = ("ovn-controller", "flows", "datapath", "ovsdb", "bridge",
         "other-check", "gateway", "peers", "daemon", "stale", "services")
#: The reasons of a local fault (the ``reason`` label; the Node
#: condition's reason).
REASONS = ("KuryrRecordStale", "KuryrDaemonNotReady", "KuryrLocalCheckFailed",
           "KuryrGatewayUnreachable", "KuryrPeersUnreachable",
           "KuryrCanaryUnreachable", "KuryrServicePathBroken")
#: Header fields.
HEADER = ("published", "cluster", "kind", "since", "judged", "troubled", "healthy",
          "faulty", "suspect", "rows")
_H = len(HEADER)


@dataclasses.dataclass(frozen=True)
class Figures:
    cluster: bool
    kind: int            # index into KINDS
    since: float         # epoch seconds the cluster-wide fault began
    judged: int
    troubled: int
    healthy: int
    faulty: int
    suspect: int
    #: (node, index into REASONS) of every node in a local fault
    faults: tuple[tuple[str, int], ...] = ()


class VerdictBoard:
    """Named access (see the module)."""

    def __init__(self, header: Any = None, reasons: Any = None,
                 labels: Any = None) -> None:
        self._h = [0.0] * _H if header is None else header
        self._reasons = [0.0] * MAX_ROWS if reasons is None else reasons
        self._labels = bytearray(MAX_ROWS * LABEL_BYTES) if labels is None \
            else labels

    @classmethod
    def create(cls, ctx: multiprocessing.context.BaseContext) -> VerdictBoard:
        return cls(ctx.RawArray("d", _H), ctx.RawArray("d", MAX_ROWS),
                   ctx.RawArray("c", MAX_ROWS * LABEL_BYTES))

    def publish(self, figures: Figures) -> None:
        rows: Sequence[tuple[str, int]] = figures.faults[:MAX_ROWS]
        for row, (node, reason) in enumerate(rows):
            raw = node.encode()[:LABEL_BYTES].ljust(LABEL_BYTES, b"\0")
            self._labels[row * LABEL_BYTES:(row + 1) * LABEL_BYTES] = raw
            self._reasons[row] = float(reason)
        values = (True, figures.cluster, figures.kind, figures.since,
                  figures.judged, figures.troubled, figures.healthy,
                  figures.faulty, figures.suspect, len(rows))
        for i, value in enumerate(values):
            self._h[i] = float(value)

    def clear(self) -> None:
        """No figures (a process that does not judge: a follower, or the
        judge restarted; an old leader's figures must not linger)."""
        self._h[0] = 0.0

    def read(self) -> Figures | None:
        """The last figures; None when no judge ever published."""
        if not self._h[0]:
            return None
        h = [self._h[i] for i in range(_H)]
        rows = []
        for row in range(min(int(h[-1]), MAX_ROWS)):
            raw = bytes(self._labels[row * LABEL_BYTES:(row + 1) * LABEL_BYTES])
            rows.append((raw.rstrip(b"\0").decode(errors="replace"),
                         int(self._reasons[row])))
        return Figures(bool(h[1]), int(h[2]), h[3], int(h[4]), int(h[5]),
                       int(h[6]), int(h[7]), int(h[8]), tuple(rows))
