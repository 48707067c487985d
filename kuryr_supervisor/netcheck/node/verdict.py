"""``network-verdict``: the network judge's verdict on this node.

A node can be cut off while every check of its own passes: its tunnel
endpoint down, its canary reaches no peer that the other nodes reach.
Only the judge sees that, from the records of every node, and marks the
Node (``NetworkUnavailable``, our own condition). That taints it
NoSchedule, but the pods already there, which have no network, stay for
good: Kubernetes evicts only from a node that is not ``Ready``. So the
judge tells the node in its record (:mod:`kuryr_supervisor.netcheck.
codecs.clusterspec`), and while that verdict stands this check fails naming the
judge's reason: the node's readiness fails, and CNI STATUS answers 51
(:mod:`kuryr_supervisor.netcheck.node.dataplane`: existing containers may have
limited connectivity), so the runtime reports ``NetworkReady=false``, the
kubelet ``Ready=False``, and the node lifecycle controller's NoExecute
taint moves the pods elsewhere.

Only a standing verdict counts (:class:`~kuryr_supervisor.
netcheck.node.clusterview.ClusterView`): one its judge stopped renewing lapses and the
node judges alone again. Only the verdicts whose evidence the node cannot
see itself (:data:`OFF_NODE`: what the other nodes' probes, or its
canary's of its gateway or of the canary Service's VIP, found) fail the check: for a local check that
fails, a daemon not ready or a record gone stale, the node's own checks
already fail its readiness and STATUS, naming the cause first-hand and
with the right code (50 when only new ADDs are at stake), and clear the
moment the cause does. The node's record never carries this check
(:data:`~kuryr_supervisor.netcheck.node.dataplane.RECORD_CHECKS`), nor does the
readiness it reports count it, so a verdict never feeds itself.

An I/O check by sort (it runs on the timer, so STATUS reads it from the
snapshot) that reads memory only.
"""
from __future__ import annotations

from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort
from kuryr_supervisor.netcheck.node.clusterview import ClusterView

NAME = "network-verdict"
#: The judge's reasons seen only from off the node.
OFF_NODE = frozenset({"KuryrPeersUnreachable", "KuryrCanaryUnreachable",
                      "KuryrGatewayUnreachable", "KuryrServicePathBroken"})


class VerdictCheck(Check):
    name = NAME
    kind = Kind.READINESS
    sort = Sort.IO

    def __init__(self, view: ClusterView) -> None:
        self.view = view

    def run(self, now: float) -> Result:
        verdict = self.view.node_fault()
        if verdict is None:
            return Result.passed("the network judge holds no fault of this "
                                 "node" if self.view.judged else
                                 "no network judge's verdict on this node")
        if verdict.reason not in OFF_NODE:
            return Result.passed(f"the network judge holds this node faulty "
                                 f"({verdict.reason}): the node's own "
                                 "checks say why")
        return Result.failed(
            f"the network judge finds this node's network broken since "
            f"{verdict.since or 'a moment'} ({verdict.reason}): "
            f"{verdict.message}")
