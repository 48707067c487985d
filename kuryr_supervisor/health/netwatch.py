"""The HealthManager's network duties, beside its loop: publish what CNI
STATUS answers, and write the node's NodeNetwork record.

Both read what the loop already produced (the I/O checks' last snapshot
and the published verdict) and never run a check themselves:

* :class:`StatusFlags`, on a thread of its own (:mod:`.pollloop`) every
  :data:`INTERVAL` seconds, turns the data-plane checks into the STATUS answer in shared
  memory (:mod:`.dataplane`), logging each change once; the Server answers
  STATUS from it without waiting on anything;
* the record writer (:mod:`.netrecord`, Kubernetes mode, ``[network_health]
  record``) on another, since an API write may take the client's timeout;
* with the OVS binding, the canary's agent (:mod:`.canary`) on a third:
  it plugs the canary port the controller made for the node and aims its
  prober; the record carries what the prober found.

:func:`from_conf` builds and starts them for the CNI role.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from oslo_config import cfg

from kuryr_supervisor.health.checks.ovsdb import OvsdbCheck
from kuryr_supervisor.health.dataplane import Results, status_answer
from kuryr_supervisor.health.monitor import HealthMonitor
from kuryr_supervisor.health.pollloop import PollLoop
from kuryr_supervisor.state import SharedState, StatusCause
from kuryr_supervisor.state.cnistatus import StatusBoard

if TYPE_CHECKING:
    from kuryr_supervisor.health.canary.agent import CanaryAgent

LOG = logging.getLogger(__name__)

INTERVAL = 0.2
#: Seconds between two looks of the canary's agent.
CANARY_INTERVAL = 1.0


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
    """The flags' loop, the record writer's if there is one, and the
    canary's (:mod:`.canary`) if the node has one."""

    def __init__(self, flags: StatusFlags, record: PollLoop | None = None,
                 *, canary: CanaryAgent | None = None,
                 interval: float = INTERVAL) -> None:
        self.flags, self.record, self.canary = flags, record, canary
        self._loop = PollLoop(flags.update, interval=interval,
                              name="net-status")
        self._canary_loop = None if canary is None else PollLoop(
            canary.step, interval=CANARY_INTERVAL, name="canary")

    def start(self) -> NetworkWatch:
        self._loop.start()
        for loop in (self.record, self._canary_loop):
            if loop is not None:
                loop.start()
        return self

    def stop(self) -> None:
        self._loop.stop()
        for loop in (self.record, self._canary_loop):
            if loop is not None:
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


def canary_from_conf(monitor: HealthMonitor, conf: cfg.ConfigOpts,
                     client: Any) -> CanaryAgent | None:
    """The node's canary (the OVS binding, ``[network_health] canary``),
    over the ``ovsdb`` check's held connection; None when it cannot be
    had (said once: the rest goes on without it)."""
    check = monitor.find("ovsdb")
    if conf.binding.driver != "ovs" or not conf.network_health.canary or \
            not isinstance(check, OvsdbCheck):
        return None
    from kuryr_supervisor.health.canary import agent
    try:
        return agent.from_conf(conf, client, client.node, check.db)
    except OSError as exc:
        LOG.warning("no canary on this node: %s", exc)
        return None


def from_conf(monitor: HealthMonitor, state: SharedState,
              conf: cfg.ConfigOpts) -> NetworkWatch | None:
    """Started network duties for the CNI role; None in the controller's."""
    if conf.role != "cni":
        return None
    results = snapshot_results(monitor)
    record = canary = None
    from kuryr_supervisor.kubernetes import client as k8s
    if conf.network_health.record and k8s.is_configured(conf):
        from kuryr_supervisor.health.dataplane import ReportSource
        from kuryr_supervisor.health.netrecord import RecordWriter, record_loop
        client = k8s.K8sClient.from_conf(conf)
        opts = conf.network_health
        canary = canary_from_conf(monitor, conf, client)
        record = record_loop(RecordWriter(
            client, client.node, ReportSource(
                state.overall, results,
                probes=canary.results if canary is not None else None),
            heartbeat=lambda: float(opts.record_heartbeat),
            min_interval=lambda: float(opts.record_min_interval),
            counted=state.cni_status.count_write))
    return NetworkWatch(StatusFlags(state.cni_status, results),
                        record, canary=canary).start()
