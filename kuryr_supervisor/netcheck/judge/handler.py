"""The ``network_health`` handler: the network judge, on the leader only.

A thin shell around the pure judge (:mod:`.judge`):

1. list every Node (:mod:`.nodes`), and carry on the local faults our own
   condition already says (a new leader does not judge afresh: a node
   stays marked until proven healthy);
2. list, then watch, every NodeNetwork record (:mod:`.records`), through
   the same loop as the pods' (resume, relist, backoff);
3. at once on every record change, when a verdict falls due by the
   clock alone (:func:`~.judge.due`: a symptom held ``fault_after``, a
   recovery, a record turning stale), and at least every
   ``judge_interval`` seconds, judge the records of Nodes that exist
   (:mod:`.known`: a record named after no Node is ignored), write the
   verdicts into the records (:mod:`.verdictspecs`: the cluster's, and
   each faulty node's own, renewed while they last), then the Node
   conditions that differ (during a cluster-wide fault: none, but the
   withdrawals), release ours on nodes no longer judged, tell the Events
   and publish the figures (:mod:`.report`);
4. every ``resync_interval`` seconds, list every Node again, so what
   someone else changed of our conditions is set again.

Ready once the records are listed. Writes to Nodes are fenced like the
port handler's (only while leading). With ``[network_health]
release_on_stop`` (uninstalling), a graceful stop releases every condition
of ours, and takes the verdict out of every record, before the process ends (:meth:`NetworkHealthHandler.finish`: the
worker waits for it).

Built by :func:`.assembly.judge` (the entry point), every collaborator
given.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from oslo_config import cfg

from kuryr_supervisor.controller.runtime import Runtime
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes import events
from kuryr_supervisor.netcheck.codecs import clusterspec
from kuryr_supervisor.netcheck.codecs import conditions as nc
from kuryr_supervisor.netcheck.judge import judge as rules
from kuryr_supervisor.netcheck.judge import specrelease
from kuryr_supervisor.netcheck.judge.known import KnownNodes
from kuryr_supervisor.netcheck.judge.nodes import NodeConditions
from kuryr_supervisor.netcheck.judge.records import RecordBook, RecordSource
from kuryr_supervisor.netcheck.judge.report import Report
from kuryr_supervisor.netcheck.judge.verdictspecs import VerdictSpecs

LOG = logging.getLogger(__name__)

Clock = Callable[[], float]


def params(conf: cfg.ConfigOpts) -> rules.Params:
    """The judge's parameters, read afresh (SIGHUP changes them)."""
    o = conf.network_health
    return rules.Params(
        daemon_grace=o.daemon_grace, stale_grace=o.stale_grace,
        fault_after=o.fault_after, recover_after=o.recover_after,
        flap_count=o.flap_count, flap_window=o.flap_window,
        flap_hold=o.flap_hold, cluster_fraction=o.cluster_fraction,
        cluster_settle=o.cluster_settle, correlation=o.correlation)


class NetworkHealthHandler:
    """See the module docstring; ``clock`` and ``wall`` are the judge's."""

    def __init__(self, rt: Runtime, *, client: k8s.K8sClient,
                 book: RecordBook, nodes: NodeConditions, known: KnownNodes,
                 specs: VerdictSpecs, recorder: events.EventRecorder,
                 report: Report, clock: Clock = time.monotonic,
                 wall: Clock = time.time) -> None:
        self.rt, self.conf, self.client = rt, rt.conf, client
        self._clock, self._wall = clock, wall
        self.book, self.nodes, self.known = book, nodes, known
        self.specs, self.recorder, self.report = specs, recorder, report
        self.state = rules.State()
        self._beat = rt.beat
        self._judged_at = 0.0
        self._due = 0.0
        self._listed_at = 0.0
        # Built in every replica's handler process, leading or not: the
        # figures are the leader's alone, none left from an earlier one.
        board = getattr(rt.ctx.state, "verdicts", None)
        if board is not None:
            board.clear()

    # -- running ---------------------------------------------------------------
    def run(self, stopping: threading.Event, beat: Callable[[], None]) -> None:
        with self.rt.running(beat):
            try:
                if not self.start(stopping):
                    return
                self.rt.informer(
                    RecordSource(self.client, beat=self._beat), self.book,
                    heartbeat=self.tick, what="NodeNetwork",
                    wake_in=self.wake_in).run(stopping)
                if self.conf.network_health.release_on_stop:
                    self.release_all()
            finally:
                self.stop()

    def finish(self, timeout: float) -> None:
        """SIGTERM (``stopping`` already set): wait for :meth:`run` to end,
        its release included, for at most ``timeout`` seconds."""
        self.rt.finish(timeout, "network judge")

    def start(self, stopping: threading.Event) -> bool:
        """Start posting Events, list the Nodes (retried until the API
        answers) and carry on the faults they say; False if stopped
        first."""
        self.recorder.start()
        if not self._load(stopping):
            return False
        self.state = rules.seed(self.nodes.faults(), self._clock())
        return True

    def stop(self) -> None:
        """Post the Events still queued."""
        self.recorder.stop()

    def _load(self, stopping: threading.Event) -> bool:
        """The first list of Nodes, retried until it answers."""
        failing = False
        while not stopping.is_set():
            self._beat()
            try:
                self._list_nodes()
            except k8s.K8sError as exc:
                if not failing:
                    LOG.warning("cannot list Nodes yet: %s", exc)
                failing = True
                stopping.wait(1.0)
                continue
            self._listed_at = self._clock()
            return True
        return False

    def wake_in(self) -> float:
        """Seconds until the next judgement is due (the watch loop's
        ``wake_in``): none when a record changed."""
        return min(self.book.wake_in(), max(0.0, self._due - self._clock()))

    def tick(self) -> None:
        """Heartbeat; judge when a record changed, a verdict fell due or
        the interval passed; list Nodes again when the resync is due."""
        self._beat()
        opts = self.conf.network_health
        now = self._clock()
        if now - self._listed_at >= float(opts.resync_interval):
            self._listed_at = now           # a failure waits a whole period
            try:
                self._list_nodes()
            except k8s.K8sError as exc:
                LOG.info("Node resync postponed: %s", exc)
        if self.book.dirty or now >= self._due or \
                now - self._judged_at >= float(opts.judge_interval):
            try:
                self.judge(now)
            except k8s.K8sError as exc:       # an outage, not our failure
                LOG.info("judgement postponed: %s", exc)
            except Exception:  # noqa: BLE001 - counted, the loop goes on
                LOG.exception("network judgement failed")
                self.rt.failed()

    def _list_nodes(self) -> None:
        """List every Node: their conditions, and which exist."""
        self.nodes.load(self._beat)
        self.known.listed(self.nodes.nodes)

    def judged(self) -> dict[str, rules.Seen]:
        """The records the judge counts: those of Nodes that exist."""
        seen = self.book.seen
        return {n: seen[n] for n in self.known.existing(seen)}

    def judge(self, now: float) -> rules.Judgement:
        """One judgement: verdicts, the records' verdicts, wanted
        conditions, writes, report."""
        self.book.looked()
        self._judged_at = now
        p = params(self.conf)
        # Whatever fails below, the loop does not spin on a past due time.
        self._due = now + float(self.conf.network_health.judge_interval)
        seen = self.judged()
        self.state, j = rules.judge(self.state, seen, now, p)
        self._due = rules.due(self.state, seen, now, p)
        self.specs.judged(j, now, seen)
        self.specs.flush(now)
        self.want(j)
        self.nodes.flush(self._beat)
        self.rt.succeeded()
        self.report.tell(j)
        return j

    def want(self, j: rules.Judgement) -> None:
        """What each Node should say: nothing moves during a cluster-wide
        fault (but the withdrawals); a node marked by us and no longer
        judged is released."""
        if j.cluster is not None:
            for node in j.withdrawn:
                self.nodes.want[node] = nc.Want(nc.HEALTHY)
            return
        for node, verdict in j.verdicts.items():
            self.nodes.want[node] = (
                nc.Want(nc.FAULT, verdict.reason, verdict.message)
                if verdict.faulty else nc.Want(nc.HEALTHY))
        for node in self.nodes.marked() - set(j.verdicts):
            self.nodes.want[node] = nc.Want(nc.RELEASE)

    def release_all(self) -> None:
        """Uninstalling: release every condition of ours and the verdict
        in every record (see the module)."""
        try:
            specrelease.release(self.client, (clusterspec.KEY,),
                                beat=self._beat)
        except k8s.K8sError as exc:
            LOG.warning("cannot take the cluster's verdict out of the "
                        "records: %s", exc)
        try:
            self.nodes.load(self._beat)
        except k8s.K8sError as exc:
            LOG.warning("cannot release the network conditions: %s", exc)
            return
        marked = self.nodes.marked()
        self.nodes.release(marked)
        while self.nodes.pending():
            before = self.nodes.writes
            self.nodes.flush(self._beat)
            if self.nodes.writes == before:
                break
        LOG.info("released the network conditions of %d nodes (%d left)",
                 len(marked), len(self.nodes.pending()))
