"""The judge's verdicts, told: Events, the metrics' figures and the log,
each once per change.

* a node that turns faulty: a Warning Event ``NodeNetworkFault`` on its
  Node (``kubectl describe node`` shows it beside the conditions); back to
  healthy: Normal ``NodeNetworkRecovered``; a local fault withdrawn into a
  cluster-wide one: Normal ``NodeNetworkFaultWithdrawn``;
* a cluster-wide fault: a Warning Event ``ClusterNetworkFault`` naming what
  most nodes share and what that most likely is (on the namespace of the
  controller's Lease, ``kube-system`` by default: it is about no one
  node), and Normal ``ClusterNetworkRecovered`` when it is over;
* the figures (:class:`~kuryr_supervisor.state.netverdicts.VerdictBoard`)
  for ``/metrics``: a cluster-wide fault and its kind, the nodes judged, in
  trouble, healthy, in a local fault, suspect, and each node in a local
  fault with its reason.

Events go through the recorder's bounded queue (aggregated and
rate-limited as client-go's are): the judge never waits for them.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kuryr_supervisor.kubernetes.events import Note, Subject
from kuryr_supervisor.netcheck.judge.judge import Cluster, Judgement
from kuryr_supervisor.state.netverdicts import KINDS, REASONS, Figures, VerdictBoard

LOG = logging.getLogger(__name__)


class Report:
    """See the module; ``emit`` posts a note (the recorder's ``record``)."""

    def __init__(self, emit: Callable[[Note], object], board: VerdictBoard
                 | None, namespace: str, *,
                 wall: Callable[[], float] = time.time) -> None:
        self._emit, self.board = emit, board
        self.namespace = namespace
        self._wall = wall
        self._cluster: Cluster | None = None
        self._cluster_wall = 0.0

    def tell(self, j: Judgement) -> None:
        for node, faulty in j.changed:
            verdict = j.verdicts[node]
            if faulty:
                LOG.warning("node %s: local network fault (%s): %s", node,
                            verdict.reason, verdict.message)
                self._emit(Note("Warning", "NodeNetworkFault",
                                f"{verdict.reason}: {verdict.message}; the "
                                "other nodes' network is fine",
                                subject=Subject("Node", node)))
            else:
                LOG.info("node %s: network recovered", node)
                self._emit(Note("Normal", "NodeNetworkRecovered",
                                "the node's network is fine again",
                                subject=Subject("Node", node)))
        for node in j.withdrawn:
            LOG.info("node %s: local fault withdrawn: part of a cluster-wide "
                     "fault", node)
            self._emit(Note("Normal", "NodeNetworkFaultWithdrawn",
                            "the node's fault is part of a cluster-wide one; "
                            "its conditions are back to healthy",
                            subject=Subject("Node", node)))
        self._tell_cluster(j.cluster)
        self._publish(j)

    def _tell_cluster(self, cluster: Cluster | None) -> None:
        subject = Subject("Namespace", self.namespace)
        if cluster is not None and self._cluster is None:
            self._cluster_wall = self._wall()
            LOG.warning("cluster-wide network fault: %s", cluster.message)
            self._emit(Note("Warning", "ClusterNetworkFault", cluster.message,
                            key=cluster.kind, subject=subject))
        elif cluster is None and self._cluster is not None:
            LOG.info("cluster-wide network fault over")
            self._emit(Note("Normal", "ClusterNetworkRecovered",
                            "the cluster-wide network fault is over; nodes "
                            "are judged one by one again", subject=subject))
        self._cluster = cluster

    def _publish(self, j: Judgement) -> None:
        if self.board is None:
            return
        faulty = tuple(sorted((v.node, REASONS.index(v.reason))
                              for v in j.verdicts.values()
                              if v.faulty and v.reason in REASONS))
        suspect = sum(v.suspect for v in j.verdicts.values())
        self.board.publish(Figures(
            cluster=j.cluster is not None,
            kind=KINDS.index(j.cluster.kind) if j.cluster is not None else 0,
            since=self._cluster_wall if j.cluster is not None else 0.0,
            judged=j.judged, troubled=j.troubled,
            healthy=j.judged - len(faulty) - suspect, faulty=len(faulty),
            suspect=suspect, faults=faulty))
