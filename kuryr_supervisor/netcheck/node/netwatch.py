"""The HealthManager's network duties, beside its loop: publish what CNI
STATUS answers, and write the node's NodeNetwork record.

Both read what the loop already produced (the I/O checks' last snapshot
and the published verdict) and never run a check themselves:

* :class:`StatusFlags`, on a thread of its own (:mod:`~kuryr_supervisor.health.pollloop`) every
  :data:`INTERVAL` seconds, turns the data-plane checks into the STATUS answer in shared
  memory (:mod:`.dataplane`), logging each change once; the Server answers
  STATUS from it without waiting on anything;
* the record writer (:mod:`.netrecord`, Kubernetes mode, ``[network_health]
  record``) on another, since an API write may take the client's timeout;
  with it, the watch of the node's own record (:mod:`.recordfollow`) on a
  third, which tells the judge's word (:mod:`.clusterview`) and the
  canary's assignment the moment the controller writes them: STATUS
  spares the checks a cluster-wide fault explains (:mod:`.statushold`),
  and the ``network-verdict`` check (:mod:`.verdict`) fails while
  the judge holds the node's own network broken;
* with the OVS binding, the canary's agent (:mod:`.canary`) on a fourth:
  it plugs the canary port the controller made for the node and aims its
  prober; the record carries what the prober found;
* with the OVS binding, the node port's agent (:mod:`.nodeport`) on a
  fifth: it keeps the node's own port into the pod network plugged as
  the record's spec names it.

:func:`from_conf` starts them with the pieces the node side's
composition root (:mod:`.assembly`) made once: the judge's view and the
canary.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from oslo_config import cfg

from kuryr_supervisor.health.monitor import HealthMonitor, verdict
from kuryr_supervisor.health.pollloop import PollLoop
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.netcheck.node.canary.agent import CanaryAgent
from kuryr_supervisor.netcheck.node.clusterview import ClusterView
from kuryr_supervisor.netcheck.node.dataplane import (
    NOT_REPORTED,
    ReportSource,
    Results,
    status_answer,
)
from kuryr_supervisor.netcheck.node.netrecord import RecordWriter, record_loop
from kuryr_supervisor.netcheck.node.nodeport.agent import NodePortAgent
from kuryr_supervisor.netcheck.node.recordfollow import RecordFollower
from kuryr_supervisor.netcheck.node.statushold import StatusHold
from kuryr_supervisor.state import Overall, SharedState, StatusCause
from kuryr_supervisor.state.cnistatus import Excuse, StatusBoard

LOG = logging.getLogger(__name__)

INTERVAL = 0.2
#: Seconds between two looks of the canary's agent (and the node port's).
CANARY_INTERVAL = 1.0


class StatusFlags:
    """See the module; :meth:`update` is one look. ``hold``: which
    failing checks STATUS does not fail for (:mod:`.statushold`; None: a
    node without a network judge excuses none)."""

    def __init__(self, board: StatusBoard,
                 results: Callable[[], Results], *,
                 hold: StatusHold | None = None) -> None:
        self.board, self._results = board, results
        self.hold = hold
        # None: the first look publishes, whatever an earlier HealthManager
        # (this one's predecessor, restarted) left in shared memory.
        self._last: tuple[int, StatusCause, str, Excuse] | None = None

    def answer(self) -> tuple[int, StatusCause, str, Excuse]:
        """What STATUS answers now: the failing checks not excused; while
        it succeeds, the excused ones named with their excuse."""
        results = self._results()
        excused = self.hold(results) if self.hold is not None else {}
        code, cause, detail = status_answer(results, excused)
        if code or not excused:
            return code, cause, detail, max(excused.values(),
                                             default=Excuse.NONE)
        _, cause, detail = status_answer({n: results[n] for n in excused})
        return 0, cause, detail, max(excused.values())

    def update(self) -> None:
        answer = self.answer()
        if answer == self._last:
            return
        code, _, detail, _ = answer
        if code != (self._last[0] if self._last is not None else 0):
            if code:
                LOG.warning("CNI STATUS now answers code %d: %s", code, detail)
            else:
                LOG.info("CNI STATUS answers success again")
        self.board.publish(*answer)
        self._last = answer


class Loop(Protocol):
    """A thread of its own beside the HealthManager's loop."""

    def start(self) -> object: ...
    def stop(self) -> None: ...


class NetworkWatch:
    """The flags' loop and the others given (the record writer's, the
    record's watch), and the canary's (:mod:`.canary`) if the node has
    one."""

    def __init__(self, flags: StatusFlags, loops: Sequence[Loop] = (),
                 *, canary: CanaryAgent | None = None,
                 node_port: NodePortAgent | None = None,
                 interval: float = INTERVAL) -> None:
        self.flags, self.canary, self.node_port = flags, canary, node_port
        self._loops: list[Loop] = [PollLoop(flags.update, interval=interval,
                                            name="net-status"), *loops]
        if canary is not None:
            self._loops.append(PollLoop(canary.step, interval=CANARY_INTERVAL,
                                        name="canary"))
        if node_port is not None:
            self._loops.append(PollLoop(node_port.step,
                                        interval=CANARY_INTERVAL,
                                        name="node-port"))

    def start(self) -> NetworkWatch:
        for loop in self._loops:
            loop.start()
        return self

    def stop(self) -> None:
        for loop in self._loops:
            loop.stop()
        if self.canary is not None:
            self.canary.close()

    def status(self) -> dict[str, Any] | None:
        """The canary's part of ``/status`` (None: no canary here)."""
        return None if self.canary is None else self.canary.status()


def snapshot_results(monitor: HealthMonitor) -> Callable[[], Results]:
    """The I/O checks' results of the monitor's last snapshot."""
    def results() -> Results:
        snap = monitor.snapshot
        return snap.results if snap is not None else {}
    return results


def reported(monitor: HealthMonitor,
             overall: Callable[[], Overall]) -> Callable[[], Overall]:
    """The daemon's verdict as its record reports it: the published one,
    its readiness without the checks the record never counts
    (:data:`~.dataplane.NOT_REPORTED`: the judge's own verdict on the
    node, which would otherwise keep itself up)."""
    def reading() -> Overall:
        published, last = overall(), monitor.last
        if last is None or published.checked_at <= 0:
            return published
        own = verdict(last.checks, exclude=NOT_REPORTED)
        return dataclasses.replace(published, ready=own.ready,
                                   summary=own.summary)
    return reading


def from_conf(monitor: HealthMonitor, state: SharedState,
              conf: cfg.ConfigOpts, view: ClusterView | None, *,
              canary: CanaryAgent | None = None,
              node_port: NodePortAgent | None = None,
              master_pid: int | None = None) -> NetworkWatch:
    """Started network duties, built by the node side's composition root
    (:mod:`.assembly`: ``view`` the judge's word, None without the
    record; ``canary`` and ``node_port`` the node's, given only with a
    view; ``master_pid``
    the daemon's, named in its client's User-Agent)."""
    results = snapshot_results(monitor)
    loops: list[Loop] = []
    hold = None
    if view is not None:
        client = k8s.K8sClient.from_conf(conf, master_pid=master_pid)
        opts = conf.network_health
        told = [view.take] + ([canary.take] if canary is not None else []) \
            + ([node_port.take] if node_port is not None else [])

        def seen(obj: Mapping[str, Any] | None) -> None:
            for tell in told:
                tell(obj)
        loops.append(record_loop(RecordWriter(
            client, client.node, ReportSource(
                reported(monitor, state.overall), results,
                probes=canary.results if canary is not None else None,
                lost=state.lost_ports.read,
                service=canary.service if canary is not None
                else lambda: None, node_port_wanted=node_port is not None),
            heartbeat=lambda: float(opts.record_heartbeat),
            min_interval=lambda: float(opts.record_min_interval),
            counted=state.cni_status.count_write, seen=seen,
            absent=view.absent)))
        loops.append(RecordFollower(client, client.node, seen,
                                    backoff_max=float(conf.watcher.backoff_max)))
        hold = StatusHold(view, lambda: float(opts.status_hold))
    return NetworkWatch(StatusFlags(state.cni_status, results, hold=hold),
                        loops, canary=canary, node_port=node_port).start()
