"""The HealthManager worker: runs the checks on a timer and serves the probes.

A thin shell around :class:`~kuryr_supervisor.health.monitor.HealthMonitor` (the
logic) and :class:`~kuryr_supervisor.health.probes.ProbeApp` (the HTTP answers):

- the probe server is :mod:`kuryr_supervisor.health.httpserver`'s bounded
  server (a selector thread and a fixed pool; connections, threads, header
  and idle time bounded), built by :func:`build_server` on the listening
  socket the master bound before it forked (so a probe sent while this
  worker is being replaced waits in the backlog for the next one);
  its threads never touch the main loop, so the heartbeat does not depend
  on how many clients are connected; a second one, built the same way,
  serves only ``/metrics`` on the master's ``[metrics] host:port`` listener
  (absent when the master could not bind it: /metrics stays on the probe
  port);
- the main loop starts the I/O checks every ``[health] check_interval``
  (each on a thread of its own, under its own deadline: see
  :mod:`kuryr_supervisor.health.runner`), waits for them at most half a
  heartbeat interval, publishes the verdict, and heartbeats at least every
  ``[supervisor] heartbeat_interval`` even when the check interval is
  longer; a check that answers later wakes it to republish. Nothing it
  does waits on a dependency: the Node condition's patch is made on a
  thread of its own too. Both options are re-read every cycle, so SIGHUP
  changes them in place;
- on SIGTERM it keeps answering (readiness already fails through the draining
  flag) until the Server (controller role: the Handler) is gone or
  ``graceful_shutdown_timeout`` - 1 s has passed, so the kubelet sees the pod go unready rather than refused.
"""
from __future__ import annotations

import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from cotyledon.types import WorkerId
from oslo_config import cfg

from kuryr_supervisor.health import httpserver, nodeevents
from kuryr_supervisor.health.checks import Check, default_checks
from kuryr_supervisor.health.httpserver import BoundedHTTPServer, Limits
from kuryr_supervisor.health.metrics import IpamSampler, MetricsApp, MetricsExporter
from kuryr_supervisor.health.monitor import HealthMonitor, Report
from kuryr_supervisor.health.probes import ProbeApp
from kuryr_supervisor.health.runner import Offloaded
from kuryr_supervisor.kubernetes import nodecondition
from kuryr_supervisor.kubernetes.nodecondition import NodeConditionPublisher
from kuryr_supervisor.netcheck.node import netwatch
from kuryr_supervisor.netcheck.node.assembly import NodeNetwork
from kuryr_supervisor.state import Component, SharedState, WorkerKind
from kuryr_supervisor.workers.base import Worker

LOG = logging.getLogger(__name__)

#: Seconds of the interpreter's thread switch interval in the HealthManager.
SWITCH_INTERVAL = 0.0005


def probe_limits(conf: cfg.ConfigOpts) -> Limits:
    """The probe listener's bounds from ``[cni_health_server]``."""
    opts = conf.cni_health_server
    return Limits(max_connections=opts.max_connections, threads=opts.threads,
                  header_timeout=opts.header_timeout,
                  idle_timeout=opts.idle_timeout)


def build_server(app: Any, sock: socket.socket,
                 conf: cfg.ConfigOpts) -> BoundedHTTPServer:
    """A started, bounded server for ``app`` on the listening ``sock``: the
    one way the HealthManager serves HTTP (see
    :mod:`kuryr_supervisor.health.httpserver`)."""
    return httpserver.serve(app, sock, probe_limits(conf))


#: Builds extra checks in the worker process (after the fork), so a check
#: that holds a client or a socket never shares it with the master; the
#: master's pid names the daemon in its clients' User-Agent.
CheckFactory = Callable[[SharedState, cfg.ConfigOpts, int], Iterable[Check]]
#: The role's base set of checks (the CNI role's by default).
BaseChecks = Callable[..., list[Check]]
#: Assembles the node's side of network health in the worker process
#: (:func:`kuryr_supervisor.netcheck.node.assembly.build`), from the
#: options and the master's pid.
NodeFactory = Callable[[cfg.ConfigOpts, int], NodeNetwork]


class HealthManagerWorker(Worker):
    """The HealthManager; other subsystems add checks (e.g. ``k8s-api``
    readiness) with ``extra_checks`` or, for checks holding connections,
    ``check_factory``. ``node_network``: given, it speaks for the node (the
    CNI role's): the node's side of network health, assembled once
    (:mod:`~kuryr_supervisor.netcheck.node.assembly`: the data-plane checks
    over one OVSDB connection, STATUS flags, the node's record and the
    judge's word on it, the canary), the node's Events
    (:mod:`~kuryr_supervisor.health.nodeevents`); None (the controller
    role's) speaks for no node."""

    name = "HealthManager"
    kind = WorkerKind.HEALTH

    def __init__(self, worker_id: WorkerId, state: SharedState,
                 conf: cfg.ConfigOpts, master_pid: int, *,
                 probe_listener: socket.socket,
                 metrics_listener: socket.socket | None = None,
                 extra_checks: Iterable[Check] = (),
                 check_factory: CheckFactory | None = None,
                 base_checks: BaseChecks = default_checks,
                 node_network: NodeFactory | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(worker_id, state, conf, master_pid)
        self._probe_listener = probe_listener
        self._metrics_listener = metrics_listener
        self._base_checks = base_checks
        self._extra = tuple(extra_checks)
        self._factory = check_factory
        self._node_network = node_network
        self._clock = clock
        self._closed = threading.Event()
        self._wake = threading.Event()
        self.monitor: HealthMonitor | None = None
        self.server: BoundedHTTPServer | None = None
        self.metrics_server: BoundedHTTPServer | None = None
        self._ipam: IpamSampler | None = None
        self._condition: NodeConditionPublisher | None = None
        self._patcher: Offloaded | None = None
        self._events: nodeevents.NodeEvents | None = None
        self._network: netwatch.NetworkWatch | None = None

    # -- pieces (each callable on its own, for tests) ---------------------------
    def start(self) -> BoundedHTTPServer:
        """Build the monitor, take the first snapshot, start serving."""
        extra = list(self._extra)
        if self._factory is not None:
            extra.extend(self._factory(self.state, self.conf,
                                       self._master_pid))
        # The node's side of network health (the CNI role's), assembled
        # once: its checks among the others, its loops started below.
        node = self._node_network(self.conf, self._master_pid) \
            if self._node_network is not None else None
        if node is not None:
            extra.extend(node.checks())
        checks = self._base_checks(self.state, self.conf, self._master_pid,
                                   extra=extra)
        self.monitor = HealthMonitor(self.state, self.conf, checks,
                                     on_change=self._wake.set)
        self._condition = nodecondition.from_conf(
            self.conf, master_pid=self._master_pid)
        if self._condition is not None:
            self._patcher = Offloaded(self._condition.update,
                                      "node-condition")
        self._events = nodeevents.from_conf(
            self.state, self.conf, master_pid=self._master_pid) \
            if node else None
        # The first snapshot before the first request: no probe sees "not
        # checked yet" for an I/O check that answers within a heartbeat.
        self.monitor.tick(wait=self.heartbeat_interval)
        # STATUS flags and the node's record, off this loop's thread.
        self._network = node.start(self.monitor, self.state) \
            if node is not None else None
        self._ipam = IpamSampler(self.state, self.conf)
        self._sample()
        network = self._network.status if self._network is not None \
            else None
        exporter = MetricsExporter(self.state, self.monitor, network)
        self.server = build_server(
            ProbeApp(self.monitor, self.state, metrics=exporter,
                     network=network),
            self._probe_listener, self.conf)
        if self._metrics_listener is not None:
            self.metrics_server = build_server(
                MetricsApp(exporter), self._metrics_listener, self.conf)
            LOG.info("metrics listening on %s:%d", self.metrics_server.host,
                     self.metrics_server.port)
        self.state.set_ready(self.component, True)
        LOG.info("health probes listening on %s:%d", self.server.host,
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
                    report = self.monitor.tick(wait=self.check_wait)
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

    @property
    def check_wait(self) -> float:
        """Seconds a cycle waits for the I/O checks it started: half a
        heartbeat interval, so the heartbeat never waits on them."""
        return self.heartbeat_interval / 2

    def _publish_condition(self, report: Report) -> None:
        """The Node condition follows liveness (not readiness: an API outage
        must not mark every node unhealthy at once). Handed to a thread of
        its own: a patch may block for the client timeout."""
        if self._patcher is not None:
            self._patcher.submit(report.verdict.live, report.verdict.summary)

    def pause(self, due: float) -> float:
        """Seconds to wait before the next turn: until due, at most one
        heartbeat interval."""
        return max(0.0, min(self.heartbeat_interval, due - self._clock()))

    def close(self) -> None:
        """Stop serving and end the loop."""
        self._closed.set()
        self._wake.set()
        if self._events is not None:
            self._events.stop()
            self._events = None
        if self._network is not None:
            self._network.stop()
            self._network = None
        if self._patcher is not None:
            self._patcher.close()
        if self.monitor is not None:
            self.monitor.close()
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
        # The Server in the CNI role; in the controller role the handlers.
        workers = ([Component.SERVER] if Component.SERVER in self.state.active
                   else [c for c in self.state.active if c != Component.HEALTH])

        def working() -> bool:
            return any(self.state.component(c).alive for c in workers)
        while self._clock() < deadline and working():
            self._closed.wait(0.1)
        LOG.info("health probes closing (workers %s)",
                 "still up at the drain deadline" if working() else "gone")
        self.close()
