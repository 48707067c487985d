"""The node's NodeNetwork record, written on change and on a slow heartbeat.

:class:`RecordWriter` is fed a report provider (:mod:`.dataplane`'s
:class:`~.dataplane.ReportSource`: whatever the node knows of its data
plane) and decides when to write:

* at once when the report's verdicts change (:meth:`NetworkReport.signature
  <kuryr_supervisor.netcheck.codecs.record.NetworkReport.signature>`: a
  check or a probe turning, the daemon's readiness; never a message or a
  latency), but never twice within ``record_min_interval``, so a flapping
  check cannot storm the API;
* otherwise every ``record_heartbeat`` seconds (60: one write per node per
  minute at steady state), so the judge can tell a silent node from a
  fine one.

A write replaces the status subresource with the object's resourceVersion
as precondition; a conflict or a vanished record is read again and
written once more. Each write's answer (the whole record, the
controller's spec with it) is handed to ``seen``: what the network judge
says of the cluster reaches the node with no read of its own
(:mod:`.clusterview`). The record is created, owned by the Node, the first
time. A failed write is tried again with backoff (up to the heartbeat);
a resource the API does not serve (the controller and its CRD not
installed) is said once and asked again every :data:`NOT_INSTALLED_RETRY`
seconds. :func:`record_loop` runs the writer beside the HealthManager's
loop, so neither the probes nor the loop ever wait for the API.

Uninstalling (:func:`release_on_stop`, the daemon's exit hook) deletes the
record and releases the judge's conditions on this node's Node.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from oslo_config import cfg

from kuryr_supervisor.health.pollloop import PollLoop
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes.nodes import patch_conditions, uid
from kuryr_supervisor.kubernetes.resource import ResourceClient
from kuryr_supervisor.kubernetes.wire import K8sError, K8sPermanent
from kuryr_supervisor.netcheck.codecs import conditions, record
from kuryr_supervisor.netcheck.codecs.record import NetworkReport

LOG = logging.getLogger(__name__)

#: Seconds between attempts while the API does not serve NodeNetworks.
NOT_INSTALLED_RETRY = 300.0
#: Seconds between two looks at the report (a look reads memory only: a
#: change is written within this of the check or the probe that turned).
POLL_INTERVAL = 0.2


class RecordCalls(Protocol):
    """What the writer (and releasing) needs of the API (``K8sClient``
    fits)."""

    @property
    def nodenetworks(self) -> ResourceClient: ...
    @property
    def nodes(self) -> ResourceClient: ...


class RecordWriter:
    """See the module; :meth:`step` is the loop's body."""

    def __init__(self, calls: RecordCalls, node: str,
                 report: Callable[[], NetworkReport], *,
                 heartbeat: Callable[[], float],
                 min_interval: Callable[[], float],
                 counted: Callable[[bool], None] = lambda ok: None,
                 seen: Callable[[Mapping[str, Any] | None], None]
                 = lambda obj: None,
                 absent: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.calls, self.node = calls, node
        self._report = report
        self._heartbeat, self._min_interval = heartbeat, min_interval
        self._counted = counted
        self._seen, self._absent = seen, absent
        self._clock, self._wall = clock, wall
        self._object: dict[str, Any] | None = None
        self._signature: tuple[Any, ...] | None = None
        self._written_at: float | None = None
        self._next_try = 0.0
        self._failures = 0
        self._said = ""

    def due(self, report: NetworkReport, now: float) -> bool:
        if now < self._next_try:
            return False
        if self._written_at is None:
            return True
        since = now - self._written_at
        if report.signature() != self._signature:
            return since >= float(self._min_interval())
        return since >= float(self._heartbeat())

    def step(self) -> bool:
        """Write if due (see the module); True when a write was made."""
        now = self._clock()
        report = self._report()
        if not self.due(report, now):
            return False
        try:
            self.write(report)
        except K8sError as exc:
            self._failed(exc, now)
            return False
        self._counted(True)
        self._signature, self._written_at = report.signature(), now
        self._failures, self._next_try = 0, 0.0
        if self._said:
            LOG.info("NodeNetwork record of %s written again", self.node)
            self._said = ""
        return True

    def _failed(self, exc: K8sError, now: float) -> None:
        self._counted(False)
        self._object = None
        self._failures += 1
        if isinstance(exc, K8sPermanent) and exc.status == 404:
            self._absent()
            said = "not installed"
            self._next_try = now + NOT_INSTALLED_RETRY
            text = ("the API does not serve NodeNetworks (the controller's "
                    "CRD is not installed): no record written; asking again "
                    f"every {NOT_INSTALLED_RETRY:.0f}s")
        else:
            said = type(exc).__name__
            heartbeat = float(self._heartbeat())
            delay = min(heartbeat, float(self._min_interval())
                        * 2 ** min(self._failures, 10))
            self._next_try = now + delay
            text = f"cannot write the NodeNetwork record of {self.node}: {exc}"
        if said != self._said:
            LOG.log(logging.INFO if said == "not installed" else
                    logging.WARNING, "%s", text)
            self._said = said

    def write(self, report: NetworkReport) -> None:
        """Replace the record's status with ``report``; raises the API's
        error (K8sError)."""
        for attempt in (1, 2):
            obj = self._object or self._current()
            body = dict(obj)
            body["status"] = record.status(
                report, heartbeat_seconds=float(self._heartbeat()),
                wall=self._wall())
            try:
                self._object = self.calls.nodenetworks.replace_status(
                    self.node, body)
                self._seen(self._object)
                return
            except K8sPermanent as exc:
                self._object = None
                # Another write came between (409) or the record was
                # deleted (404): read it again, once.
                if exc.status not in (404, 409) or attempt == 2:
                    raise

    def _current(self) -> dict[str, Any]:
        """The record as the API has it, created if it does not exist."""
        records = self.calls.nodenetworks
        obj = records.get(self.node)
        if obj is not None:
            return obj
        try:
            return records.create(record.body(
                self.node, uid(self.calls.nodes.get(self.node))))
        except K8sPermanent as exc:
            if exc.status != 409:
                raise
        found = records.get(self.node)
        if found is None:
            raise K8sPermanent("NodeNetwork vanished while created", 404)
        return found


def record_loop(writer: RecordWriter, *,
                interval: float = POLL_INTERVAL) -> PollLoop:
    """The writer's loop on a thread of its own (not started)."""
    return PollLoop(writer.step, interval=interval, name="node-record")


def release(calls: RecordCalls, node: str, own_type: str, *,
            wall: Callable[[], float] = time.time) -> bool:
    """Uninstalling: delete the node's record, then release the judge's
    conditions on its Node (:mod:`~kuryr_supervisor.netcheck.codecs.conditions`:
    our type removed, a NetworkUnavailable of ours turned False). True when
    all of it is done; an API error is logged, never raised."""
    try:
        calls.nodenetworks.delete(node)
        obj = calls.nodes.get(node)
        if obj is None:
            return True
        present = (obj.get("status") or {}).get("conditions") or []
        patch = conditions.changes(
            present, conditions.Want(conditions.RELEASE),
            own_type=own_type, wall=wall())
        if patch:
            patch_conditions(calls.nodes, node, patch)
    except K8sError as exc:
        LOG.warning("cannot release the network conditions of %s: %s",
                    node, exc)
        return False
    LOG.info("released the network record and conditions of %s", node)
    return True


def release_on_stop(conf: cfg.ConfigOpts, exit_code: object) -> bool:
    """The CNI role's exit hook: with ``[cni_install] uninstall_on_stop``,
    after a graceful stop (status 0) in Kubernetes mode, :func:`release`
    this node. A crash or a restart leaves everything as it is."""
    if exit_code not in (0, None) or not conf.cni_install.uninstall_on_stop \
            or not k8s.is_configured(conf):
        return False
    client = k8s.K8sClient.from_conf(conf)
    return release(client, client.node, conf.network_health.condition_type)
