"""The HealthManager's network duties, beside its loop: publish what CNI
STATUS answers, and write the node's NodeNetwork record.

Both read what the loop already produced (the I/O checks' last snapshot
and the published verdict) and never run a check themselves:

* :class:`StatusFlags`, on a thread of its own (:mod:`.pollloop`) every
  :data:`INTERVAL` seconds, turns the data-plane checks into the STATUS answer in shared
  memory (:mod:`.dataplane`), logging each change once; the Server answers
  STATUS from it without waiting on anything;
* the record writer (:mod:`.netrecord`, Kubernetes mode, ``[network_health]
  record``) on another, since an API write may take the client's timeout.

:func:`from_conf` builds and starts both for the CNI role.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from oslo_config import cfg

from kuryr_supervisor.health.dataplane import Results, status_answer
from kuryr_supervisor.health.monitor import HealthMonitor
from kuryr_supervisor.health.pollloop import PollLoop
from kuryr_supervisor.state import SharedState, StatusCause
from kuryr_supervisor.state.cnistatus import StatusBoard

LOG = logging.getLogger(__name__)

INTERVAL = 0.2


class StatusFlags:
    """See the module; :meth:`update` is one look."""

    def __init__(self, board: StatusBoard,
                 results: Callable[[], Results]) -> None:
        self.board, self._results = board, results
        # None: the first look publishes, whatever an earlier HealthManager
        # (this one's predecessor, restarted) left in shared memory.
        self._last: tuple[int, StatusCause, str] | None = None

    def update(self) -> None:
        answer = status_answer(self._results())
        if answer == self._last:
            return
        code, _, detail = answer
        if code != (self._last[0] if self._last is not None else 0):
            if code:
                LOG.warning("CNI STATUS now answers code %d: %s", code, detail)
            else:
                LOG.info("CNI STATUS answers success again")
        self.board.publish(*answer)
        self._last = answer


class NetworkWatch:
    """The flags' loop, and the record writer's if there is one."""

    def __init__(self, flags: StatusFlags, record: PollLoop | None = None,
                 *, interval: float = INTERVAL) -> None:
        self.flags, self.record = flags, record
        self._loop = PollLoop(flags.update, interval=interval,
                              name="net-status")

    def start(self) -> NetworkWatch:
        self._loop.start()
        if self.record is not None:
            self.record.start()
        return self

    def stop(self) -> None:
        self._loop.stop()
        if self.record is not None:
            self.record.stop()


def snapshot_results(monitor: HealthMonitor) -> Callable[[], Results]:
    """The I/O checks' results of the monitor's last snapshot."""
    def results() -> Results:
        snap = monitor.snapshot
        return snap.results if snap is not None else {}
    return results


def from_conf(monitor: HealthMonitor, state: SharedState,
              conf: cfg.ConfigOpts) -> NetworkWatch | None:
    """Started network duties for the CNI role; None in the controller's."""
    if conf.role != "cni":
        return None
    results = snapshot_results(monitor)
    record = None
    from kuryr_supervisor.kubernetes import client as k8s
    if conf.network_health.record and k8s.is_configured(conf):
        from kuryr_supervisor.health.dataplane import ReportSource
        from kuryr_supervisor.health.netrecord import RecordWriter, record_loop
        client = k8s.K8sClient.from_conf(conf)
        opts = conf.network_health
        record = record_loop(RecordWriter(
            client, client.node, ReportSource(state.overall, results),
            heartbeat=lambda: float(opts.record_heartbeat),
            min_interval=lambda: float(opts.record_min_interval),
            counted=state.cni_status.count_write))
    return NetworkWatch(StatusFlags(state.cni_status, results),
                        record).start()
