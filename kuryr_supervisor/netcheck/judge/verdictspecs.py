"""The judge's word written into every judged record's spec
(:mod:`kuryr_supervisor.netcheck.codecs.clusterspec`: what it says and why a
node needs it): the cluster-wide fault, and the judge's verdict on the
node itself while it holds it faulty.

:class:`VerdictSpecs` wants, for every judged record, the cluster's
verdict (no cluster-wide fault, or the fault declared with its kind) and
the node's (its local fault's reason, message and start, or none), and
writes each record whose spec says otherwise: a record judged for the
first time, every record when a cluster-wide fault is declared or is
over, a node's record when its local fault starts or ends, and every
record that declares something once its renewal is due (half its
lifetime, ``[network_health] verdict_lifetime``, after the last one):
a declaration lapses unless its judge renews it, so a judge that is gone
excuses and blames no node for longer than that. Never a heartbeat
otherwise: a record that already says what is wanted is not written
again. The records of the nodes that report a failing check of the
fault's kind go first (those nodes hold their CNI STATUS until they learn
it), then the nodes whose own verdict changed.

A write is a PUT of the record as last listed or watched, the judge's part
of the spec changed and the rest kept (the canary's), with the record's
resourceVersion as precondition: a record changed meanwhile (409) or
deleted (404) is left to the watch, which brings the new version for the
next pass. Writes pass the leader's write fence (a replica that lost its
Lease exits before sending one). At most :data:`MAX_WRITES` a pass,
beating between them. Any other error ends the pass and waits (2 s
doubling to :data:`BACKOFF_MAX`), said once.

Uninstalling takes the judge's part out of every record
(:mod:`.specrelease`): the nodes' STATUS is again what their checks say.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

from kuryr_supervisor.kubernetes.resource import ResourceClient
from kuryr_supervisor.kubernetes.wire import K8sError, K8sPermanent
from kuryr_supervisor.netcheck.codecs import clusterspec
from kuryr_supervisor.netcheck.codecs.clusterspec import ClusterVerdict, NodeVerdict
from kuryr_supervisor.netcheck.codecs.record import epoch, rfc3339
from kuryr_supervisor.netcheck.judge.judge import Cluster, Judgement
from kuryr_supervisor.netcheck.judge.records import RecordBook

LOG = logging.getLogger(__name__)

MAX_WRITES = 100
BACKOFF_MAX = 60.0


def _bound(want: ClusterVerdict, obj: Mapping[str, Any]) -> ClusterVerdict:
    """``want`` for the record ``obj``: its declarations name its uid
    (:mod:`~kuryr_supervisor.netcheck.codecs.clusterspec`)."""
    if not want.declares:
        return want
    uid = str((obj.get("metadata") or {}).get("uid") or "")
    return dataclasses.replace(want, record=uid)


class SpecCalls(Protocol):
    """What it needs of the API (``K8sClient`` fits)."""

    @property
    def nodenetworks(self) -> ResourceClient: ...


class VerdictSpecs:
    """See the module; ``book`` is the judge's (every record as listed
    and watched), ``judge`` names this replica in what it writes, and
    ``lifetime`` gives ``verdict_lifetime`` (read at every pass)."""

    def __init__(self, calls: SpecCalls, book: RecordBook, *,
                 judge: str, lifetime: Callable[[], float],
                 wall: Callable[[], float] = time.time,
                 beat: Callable[[], None] = lambda: None) -> None:
        self.calls, self.book = calls, book
        self.judge, self._lifetime = judge, lifetime
        self._wall, self._beat = wall, beat
        #: What each judged record should say.
        self.want: dict[str, ClusterVerdict] = {}
        self._declared: tuple[float, str] = (-1.0, "")
        #: node -> (its fault's start on the judge's clock, as text)
        self._node_since: dict[str, tuple[float, str]] = {}
        self._failures = 0
        self._next_try = 0.0
        self._said = False
        self.writes = 0

    def _since(self, since: float, now: float) -> str:
        """A start on the judge's clock as RFC 3339 text."""
        return rfc3339(self._wall() - (now - since))

    def judged(self, j: Judgement, now: float,
               nodes: Collection[str]) -> None:
        """Want what the judgement at ``now`` (the judge's clock) says of
        ``nodes`` (those judged)."""
        cluster = self._cluster(j.cluster, now)
        since: dict[str, tuple[float, str]] = {}
        want = {}
        for node in nodes:
            verdict = j.verdicts.get(node)
            mine = None
            if verdict is not None and verdict.faulty:
                held = self._node_since.get(node)
                if held is None or held[0] != verdict.since:
                    # Once per fault, so the text never moves between passes.
                    held = (verdict.since, self._since(verdict.since, now))
                since[node] = held
                mine = NodeVerdict(verdict.reason, verdict.message, held[1])
            want[node] = ClusterVerdict(cluster[0], cluster[1], mine,
                                        self.judge)
        self._node_since, self.want = since, want

    def _cluster(self, cluster: Cluster | None, now: float
                 ) -> tuple[str, str]:
        if cluster is None:
            return "", ""
        if self._declared[0] != cluster.since:
            self._declared = (cluster.since, self._since(cluster.since, now))
        return cluster.kind, self._declared[1]

    def _says(self, node: str, obj: Mapping[str, Any]
              ) -> ClusterVerdict | None | bool:
        try:
            return clusterspec.verdict(obj, node)
        except ValueError:
            return False            # not what anyone wants: written over

    def _due(self, says: ClusterVerdict) -> bool:
        """Whether a declaration's renewal is due (half its lifetime)."""
        renewed = epoch(says.renewed)
        lifetime = min(says.lifetime, float(self._lifetime()))
        return not renewed or self._wall() - renewed >= lifetime / 2

    def pending(self) -> list[str]:
        """The records that do not say what is wanted, or whose
        declaration is due for renewal: those whose node reports a failing
        check of the fault's kind first, then those whose own verdict
        changed."""
        out = []
        for node, want in self.want.items():
            obj = self.book.objects.get(node)
            if obj is None:
                continue
            says = self._says(node, obj)
            if not isinstance(says, ClusterVerdict) or \
                    says.key() != _bound(want, obj).key() or \
                    (want.declares and self._due(says)):
                out.append(node)

        def holding(node: str) -> bool:
            seen = self.book.seen.get(node)
            fault = self.want[node].fault
            return seen is not None and any(
                c.name == fault and not c.ok for c in seen.record.report.checks)

        def blamed(node: str) -> bool:
            says = self._says(node, self.book.objects[node])
            before = says.node if isinstance(says, ClusterVerdict) else None
            return (before is None) != (self.want[node].node is None)
        return sorted(out, key=lambda n: (not holding(n), not blamed(n), n))

    def flush(self, now: float) -> int:
        """Write what :meth:`pending` lists (see the module); the number
        of writes made."""
        if now < self._next_try:
            return 0
        made = 0
        renewed = rfc3339(self._wall())
        lifetime = float(self._lifetime())
        for node in self.pending()[:MAX_WRITES]:
            obj = self.book.objects[node]
            want = _bound(self.want[node], obj)
            if want.declares:
                want = dataclasses.replace(want, renewed=renewed,
                                           lifetime=lifetime)
            body = dict(obj)
            body["spec"] = clusterspec.merged(obj.get("spec"), node, want)
            try:
                self.book.objects[node] = self.calls.nodenetworks.replace(
                    node, body)
            except K8sPermanent as exc:
                if exc.status in (404, 409):
                    continue        # changed or gone meanwhile: the watch says
                self._failed(exc, now)
                break
            except K8sError as exc:
                self._failed(exc, now)
                break
            made += 1
            self._beat()
        else:
            if self._said:
                LOG.info("the judge's verdicts are written to the records "
                         "again")
            self._failures, self._said = 0, False
        self.writes += made
        if made:
            LOG.debug("the judge's verdicts written to %d records", made)
        return made

    def _failed(self, exc: K8sError, now: float) -> None:
        self._failures += 1
        self._next_try = now + min(BACKOFF_MAX, 2.0 ** self._failures)
        if not self._said:
            LOG.warning("cannot write the judge's verdicts to the records: "
                        "%s", exc)
            self._said = True
