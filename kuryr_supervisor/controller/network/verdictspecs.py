"""The cluster's verdict in every record's spec, written by the judge
(:mod:`kuryr_supervisor.kubernetes.clusterspec`: what it says and why a
node needs it).

:class:`VerdictSpecs` wants one verdict for every judged record (no
cluster-wide fault, or the fault declared with its kind) and writes each
record whose spec says otherwise: a record judged for the first time, and
every record when a cluster-wide fault is declared or is over. Never a
heartbeat: a record that already says it is not written again. The records
of the nodes that report a failing check of the fault's kind go first:
those nodes hold their CNI STATUS until they learn it.

A write is a PUT of the record as last listed or watched, the judge's part
of the spec changed and the rest kept (the canary's), with the record's
resourceVersion as precondition: a record changed meanwhile (409) or
deleted (404) is left to the watch, which brings the new version for the
next pass. At most :data:`MAX_WRITES` a pass, beating between them. Any
other error ends the pass and waits (2 s doubling to
:data:`BACKOFF_MAX`), said once.

Uninstalling takes the judge's part out of every record
(:mod:`.specrelease`): the nodes' STATUS is again what their checks say.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kuryr_supervisor.controller.network.judge import Cluster
from kuryr_supervisor.controller.network.records import RecordBook
from kuryr_supervisor.kubernetes import clusterspec
from kuryr_supervisor.kubernetes.clusterspec import ClusterVerdict
from kuryr_supervisor.kubernetes.nodenetwork import rfc3339
from kuryr_supervisor.kubernetes.wire import K8sError, K8sPermanent

LOG = logging.getLogger(__name__)

MAX_WRITES = 100
BACKOFF_MAX = 60.0


class SpecCalls(Protocol):
    def replace_nodenetwork(self, name: str, obj: Mapping[str, Any]
                            ) -> dict[str, Any]: ...


class VerdictSpecs:
    """See the module; ``book`` is the judge's (every record as listed
    and watched)."""

    def __init__(self, calls: SpecCalls, book: RecordBook, *,
                 wall: Callable[[], float] = time.time,
                 beat: Callable[[], None] = lambda: None) -> None:
        self.calls, self.book = calls, book
        self._wall, self._beat = wall, beat
        #: What every record should say.
        self.want = ClusterVerdict()
        self._declared: tuple[float, str] = (-1.0, "")
        self._failures = 0
        self._next_try = 0.0
        self._said = False
        self.writes = 0

    def judged(self, cluster: Cluster | None, now: float) -> None:
        """Want what the judgement at ``now`` (the judge's clock) says."""
        if cluster is None:
            self.want = ClusterVerdict()
            return
        if self._declared[0] != cluster.since:
            # One time per fault, so the text never moves between passes.
            self._declared = (cluster.since, rfc3339(
                self._wall() - (now - cluster.since)))
        self.want = ClusterVerdict(cluster.kind, self._declared[1])

    def _says(self, node: str, obj: Mapping[str, Any]
              ) -> ClusterVerdict | None | bool:
        try:
            return clusterspec.verdict(obj, node)
        except ValueError:
            return False            # not what anyone wants: written over

    def pending(self) -> list[str]:
        """The records that do not say what is wanted, those whose node
        reports a failing check of the fault's kind first."""
        want = self.want
        out = []
        for node, obj in self.book.objects.items():
            if node not in self.book.seen:
                continue            # not judged (never valid)
            says = self._says(node, obj)
            if not isinstance(says, ClusterVerdict) or \
                    says.fault != want.fault:
                out.append(node)

        def holding(node: str) -> bool:
            checks = self.book.seen[node].record.report.checks
            return any(c.name == want.fault and not c.ok for c in checks)
        return sorted(out, key=lambda n: (not holding(n), n))

    def flush(self, now: float) -> int:
        """Write what :meth:`pending` lists (see the module); the number
        of writes made."""
        if now < self._next_try:
            return 0
        made = 0
        for node in self.pending()[:MAX_WRITES]:
            obj = self.book.objects[node]
            body = dict(obj)
            body["spec"] = clusterspec.merged(obj.get("spec"), node,
                                              self.want)
            try:
                self.book.objects[node] = self.calls.replace_nodenetwork(
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
                LOG.info("the cluster's verdict is written to the records "
                         "again")
            self._failures, self._said = 0, False
        self.writes += made
        if made:
            LOG.info("the cluster's verdict (%s) written to %d records",
                     self.want.fault or "no cluster-wide fault", made)
        return made

    def _failed(self, exc: K8sError, now: float) -> None:
        self._failures += 1
        self._next_try = now + min(BACKOFF_MAX, 2.0 ** self._failures)
        if not self._said:
            LOG.warning("cannot write the cluster's verdict to the records: "
                        "%s", exc)
            self._said = True
