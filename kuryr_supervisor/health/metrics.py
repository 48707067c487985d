"""The only module that imports prometheus_client: /metrics at scrape time.

A custom collector on a private registry (never the process-global default
one, so no metric of an imported library leaks in and tests can build as many
as they like) reads the shared state and the monitor's check views when
scraped; nothing is updated in the background, so a figure is never older than
the last snapshot it comes from.
"""
from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

from kuryr_supervisor.health.monitor import HealthMonitor
from kuryr_supervisor.state import SharedState

PREFIX = "kuryr_supervisor_"
CONTENT_TYPE = CONTENT_TYPE_LATEST


class HealthCollector:
    """Turns the shared state and the check views into metric families."""

    def __init__(self, state: SharedState, monitor: HealthMonitor) -> None:
        self.state = state
        self.monitor = monitor

    def collect(self) -> Iterator[Metric]:
        report = self.monitor.evaluate()
        comps = self.state.components()

        up = GaugeMetricFamily(PREFIX + "worker_up",
                               "1 when the worker process is alive.",
                               labels=["component"])
        restarts = CounterMetricFamily(PREFIX + "worker_restarts",
                                       "Restarts of the worker by the master.",
                                       labels=["component"])
        age = GaugeMetricFamily(PREFIX + "worker_heartbeat_age_seconds",
                                "Seconds since the worker's last heartbeat.",
                                labels=["component"])
        memory = GaugeMetricFamily(PREFIX + "worker_memory_uss_bytes",
                                   "Unique set size of the worker process.",
                                   labels=["component"])
        for status in comps:
            label = [status.component.label]
            up.add_metric(label, 1.0 if status.alive else 0.0)
            restarts.add_metric(label, float(status.restarts))
            if status.heartbeat:
                age.add_metric(label, max(0.0, status.heartbeat_age(report.now)))
            memory.add_metric(label, float(status.memory))
        yield from (up, restarts, age, memory)

        daemon = report.get("memory")
        if daemon is not None and daemon.value is not None:
            yield GaugeMetricFamily(PREFIX + "daemon_memory_bytes",
                                    "Memory of the whole daemon (cgroup or "
                                    "USS sum).", value=daemon.value)

        ok = GaugeMetricFamily(PREFIX + "check_ok",
                               "1 when the health check passes.",
                               labels=["check", "kind"])
        for view in report.checks:
            ok.add_metric([view.name, view.kind.value], 1.0 if view.ok else 0.0)
        yield ok

        yield GaugeMetricFamily(PREFIX + "cni_consecutive_failures",
                                "Consecutive internal CNI ADD failures.",
                                value=self.state.cni_failures())
        inflight, capacity = self.state.server_load()
        yield GaugeMetricFamily(PREFIX + "server_inflight_requests",
                                "CNI requests being served.", value=inflight)
        yield GaugeMetricFamily(PREFIX + "server_capacity_requests",
                                "CNI requests the Server serves at once.",
                                value=capacity)
        yield GaugeMetricFamily(PREFIX + "live", "1 when liveness passes.",
                                value=1.0 if report.verdict.live else 0.0)
        yield GaugeMetricFamily(PREFIX + "ready", "1 when readiness passes.",
                                value=1.0 if report.verdict.ready else 0.0)


class MetricsExporter:
    """A private registry holding the health collector; renders the text."""

    def __init__(self, state: SharedState, monitor: HealthMonitor) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(HealthCollector(state, monitor))

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE
