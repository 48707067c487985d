"""The HealthManager worker: runs the checks on a timer and serves the probes.

A thin shell around :class:`~kuryr_supervisor.health.monitor.HealthMonitor` (the
logic) and :class:`~kuryr_supervisor.health.probes.ProbeApp` (the HTTP answers):

- the probe server is werkzeug's threaded server in a daemon thread, bound
  with SO_REUSEADDR so a restarted HealthManager rebinds the port at once;
  a second instance of it serves only ``/metrics`` on ``[metrics] host:port``;
  requests are logged at DEBUG only (a kubelet probes every few seconds);
- the main loop runs the I/O checks every ``[health] check_interval`` and
  publishes the verdict, and heartbeats at least every ``[supervisor]
  heartbeat_interval`` even when the check interval is longer; both options
  are re-read every cycle, so SIGHUP changes them in place;
- on SIGTERM it keeps answering (readiness already fails through the draining
  flag) until the Server is gone or ``graceful_shutdown_timeout`` - 1 s has
  passed, so the kubelet sees the pod go unready rather than refused.
"""
from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from cotyledon.types import WorkerId
from oslo_config import cfg
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from kuryr_supervisor.health.checks import Check, default_checks
from kuryr_supervisor.health.metrics import IpamSampler, MetricsApp, MetricsExporter
from kuryr_supervisor.health.monitor import HealthMonitor, Report
from kuryr_supervisor.health.probes import ProbeApp
from kuryr_supervisor.kubernetes import nodecondition
from kuryr_supervisor.kubernetes.nodecondition import NodeConditionPublisher
from kuryr_supervisor.state import Component, SharedState
from kuryr_supervisor.workers.base import Worker

LOG = logging.getLogger(__name__)

#: Seconds of the interpreter's thread switch interval in the HealthManager.
SWITCH_INTERVAL = 0.0005


class _QuietHandler(WSGIRequestHandler):
    """Probe requests are routine: log them at DEBUG, not werkzeug's INFO."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        LOG.debug("%s %s %s", self.command, self.path, code)


class ProbeServer:
    """A threaded werkzeug HTTP server for ``app`` on its own daemon thread."""

    def __init__(self, host: str, port: int, app: Any) -> None:
        # BaseWSGIServer sets allow_reuse_address: SO_REUSEADDR on bind.
        self.http: BaseWSGIServer = make_server(
            host, port, app, threaded=True, request_handler=_QuietHandler)
        self._thread = threading.Thread(target=self.http.serve_forever,
                                        kwargs={"poll_interval": 0.1},
                                        name="probe-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self.http.server_port)

    def start(self) -> ProbeServer:
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread.is_alive():   # shutdown() waits for serve_forever
            self.http.shutdown()
        self.http.server_close()
        self._thread.join(timeout=5)


#: Builds extra checks in the worker process (after the fork), so a check
#: that holds a client or a socket never shares it with the master.
CheckFactory = Callable[[SharedState, cfg.ConfigOpts], Iterable[Check]]


class HealthManagerWorker(Worker):
    """The HealthManager; other subsystems add checks (e.g. ``k8s-api``
    readiness) with ``extra_checks`` or, for checks holding connections,
    ``check_factory``."""

    name = "HealthManager"
    component = Component.HEALTH

    def __init__(self, worker_id: WorkerId, state: SharedState,
                 conf: cfg.ConfigOpts, master_pid: int, *,
                 extra_checks: Iterable[Check] = (),
                 check_factory: CheckFactory | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(worker_id, state, conf, master_pid)
        self._extra = tuple(extra_checks)
        self._factory = check_factory
        self._clock = clock
        self._closed = threading.Event()
        self._wake = threading.Event()
        self.monitor: HealthMonitor | None = None
        self.server: ProbeServer | None = None
        self.metrics_server: ProbeServer | None = None
        self._ipam: IpamSampler | None = None
        self._condition: NodeConditionPublisher | None = None

    # -- pieces (each callable on its own, for tests) ---------------------------
    def start(self) -> ProbeServer:
        """Build the monitor, take the first snapshot, start serving."""
        extra = list(self._extra)
        if self._factory is not None:
            extra.extend(self._factory(self.state, self.conf))
        checks = default_checks(self.state, self.conf, self._master_pid,
                                extra=extra)
        self.monitor = HealthMonitor(self.state, self.conf, checks,
                                     on_change=self._wake.set)
        self._condition = nodecondition.from_conf(self.conf)
        # The first snapshot before the first request: no probe ever sees
        # "not checked yet" for the I/O checks.
        self.monitor.tick()
        self._ipam = IpamSampler(self.state, self.conf)
        self._sample()
        exporter = MetricsExporter(self.state, self.monitor)
        opts = self.conf.cni_health_server
        self.server = ProbeServer(
            opts.host, opts.port,
            ProbeApp(self.monitor, self.state, metrics=exporter)).start()
        metrics = self.conf.metrics
        if metrics.port:
            # Metrics are not health: a port taken by someone else must not
            # take the probes down with a restart loop. (werkzeug answers a
            # taken port with SystemExit, after printing why.)
            try:
                self.metrics_server = ProbeServer(
                    metrics.host, metrics.port, MetricsApp(exporter)).start()
            except (OSError, SystemExit) as exc:
                LOG.error("metrics listener %s:%d cannot bind (%s); /metrics "
                          "stays on the probe port", metrics.host,
                          metrics.port, exc)
            else:
                LOG.info("metrics listening on %s:%d", metrics.host,
                         self.metrics_server.port)
        self.state.set_ready(self.component, True)
        LOG.info("health probes listening on %s:%d", opts.host,
                 self.server.port)
        return self.server

    def _sample(self) -> None:
        if self._ipam is not None:
            try:
                self._ipam.sample()
            except Exception:  # noqa: BLE001 - a figure, never the loop
                LOG.debug("IPAM sample failed", exc_info=True)

    def step(self, due: float, *, woken: bool = False) -> float:
        """One loop turn: run the checks if ``due`` has come (or only
        republish the verdict when a request saw it change), then beat.

        Returns when the checks are next due (monotonic seconds).
        """
        now = self._clock()
        if self.monitor is not None and (now >= due or woken):
            try:
                if now >= due:
                    report = self.monitor.tick()
                    due = now + float(self.conf.health.check_interval)
                    self._sample()
                    self._publish_condition(report)
                else:
                    self.monitor.publish()
            except Exception:
                LOG.exception("health check cycle failed")
                due = now + float(self.conf.health.check_interval)
        self.beat()
        return due

    def _publish_condition(self, report: Report) -> None:
        """The Node condition follows liveness (not readiness: an API outage
        must not mark every node unhealthy at once). Called from the timer,
        never the probe path: a patch may block for the client timeout."""
        if self._condition is not None:
            self._condition.update(report.verdict.live, report.verdict.summary)

    def pause(self, due: float) -> float:
        """Seconds to wait before the next turn: until due, at most one
        heartbeat interval."""
        return max(0.0, min(self.heartbeat_interval, due - self._clock()))

    def close(self) -> None:
        """Stop serving and end the loop."""
        self._closed.set()
        self._wake.set()
        if self.server is not None:
            self.server.close()
            self.server = None
        if self.metrics_server is not None:
            self.metrics_server.close()
            self.metrics_server = None

    # -- worker shell ------------------------------------------------------------
    def serve(self) -> None:
        # A probe must not wait a whole default 5 ms GIL slice behind the
        # check cycle (psutil and pyroute2 parse in Python); this process
        # does nothing else, so finer switching costs nothing that matters.
        sys.setswitchinterval(SWITCH_INTERVAL)
        self.start()
        due = self._clock() + float(self.conf.health.check_interval)
        woken = False
        while not self._closed.is_set():
            due = self.step(due, woken=woken)
            woken = self._wake.wait(self.pause(due))
            self._wake.clear()

    def drain(self) -> None:
        limit = max(0.0, float(self.conf.supervisor.graceful_shutdown_timeout)
                    - 1.0)
        deadline = self._clock() + limit
        while (self._clock() < deadline
               and self.state.component(Component.SERVER).alive):
            self._closed.wait(0.1)
        LOG.info("health probes closing (server %s)",
                 "gone" if not self.state.component(Component.SERVER).alive
                 else "still up at the drain deadline")
        self.close()
