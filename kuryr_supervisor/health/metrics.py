"""The only module that imports prometheus_client: /metrics at scrape time.

A custom collector on a private registry (never the process-global default
one, so no metric of an imported library leaks in and tests can build as many
as they like) reads the shared state and the monitor's check views when
scraped; nothing is updated in the background, so a figure is never older than
the last snapshot it comes from.

The counters live in shared memory, written by the process that owns each
(the Server: CNI requests and ADD/DEL latency; the Watcher: relists and
watch errors; the master: restarts by cause; this process: the IPAM pool,
sampled on the check timer), so they survive a restart of their writer and
of this worker. :class:`MetricsApp` serves them alone on the ``[metrics]``
listener, so opening metrics to a Prometheus server does not open
``/status`` and the probes.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from oslo_config import cfg
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry
from werkzeug.wrappers import Request, Response

from kuryr_supervisor import version
from kuryr_supervisor.cni.ipam import store as ipam_store
from kuryr_supervisor.conf import ipam as ipam_conf
from kuryr_supervisor.health.monitor import HealthMonitor
from kuryr_supervisor.state import (
    LATENCY_BUCKETS,
    TIMED_COMMANDS,
    Component,
    Fault,
    SharedState,
    lbstats,
    policystats,
)
from kuryr_supervisor.state.netverdicts import KINDS, REASONS

LOG = logging.getLogger(__name__)

PREFIX = "kuryr_supervisor_"
CONTENT_TYPE = CONTENT_TYPE_LATEST


#: The canary's part of ``/status`` (:meth:`~.netwatch.NetworkWatch.status`;
#: None on a node without one).
NetworkStatus = Callable[[], "dict[str, Any] | None"]


class HealthCollector:
    """Turns the shared state and the check views into metric families."""

    def __init__(self, state: SharedState, monitor: HealthMonitor,
                 network: NetworkStatus | None = None) -> None:
        self.state = state
        self.monitor = monitor
        self.network = network

    def collect(self) -> Iterator[Metric]:
        report = self.monitor.evaluate()
        comps = self.state.components()

        up = GaugeMetricFamily(PREFIX + "worker_up",
                               "1 when the worker process is alive.",
                               labels=["component"])
        restarts = CounterMetricFamily(PREFIX + "worker_restarts",
                                       "Restarts of the worker by the master, "
                                       "by cause.",
                                       labels=["component", "cause"])
        age = GaugeMetricFamily(PREFIX + "worker_heartbeat_age_seconds",
                                "Seconds since the worker's last heartbeat.",
                                labels=["component"])
        memory = GaugeMetricFamily(PREFIX + "worker_memory_uss_bytes",
                                   "Unique set size of the worker process.",
                                   labels=["component"])
        for status in comps:
            label = [status.component.label]
            up.add_metric(label, 1.0 if status.alive else 0.0)
            if status.heartbeat:
                age.add_metric(label, max(0.0, status.heartbeat_age(report.now)))
            memory.add_metric(label, float(status.memory))
        for (comp, cause), count in self.state.restarts_by_cause().items():
            restarts.add_metric([comp.label, cause.name.lower()], float(count))
        yield from (up, restarts, age, memory)
        yield from self._cni()
        yield from self._watch_and_ipam()
        yield from _pools(self.state.pools.rows())
        yield from self._network()
        if any(c.handler == "services" for c in self.state.active):
            yield from _services(self.state.load_balancers.read())
        if any(c.handler == "network_policy" for c in self.state.active):
            yield from _policies(self.state.policies.read())
        if Component.SERVER in self.state.active:
            yield from _canary(self.network() if self.network else None)
        yield InfoMetricFamily(PREFIX + "build", "The running version.",
                               value={"version": version.version()})

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
        faults = GaugeMetricFamily(PREFIX + "fault",
                                   "1 while the fault is present (see "
                                   "/status for what it means).",
                                   labels=["fault"])
        present = self.state.faults()
        for fault in Fault:
            if fault:
                faults.add_metric([(fault.name or "").lower()],
                                  1.0 if fault in present else 0.0)
        yield faults

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


    def _cni(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            PREFIX + "cni_requests", "CNI requests answered, by command and "
            "result code (0: success).", labels=["command", "code"])
        for (command, code), count in sorted(self.state.cni_requests().items()):
            requests.add_metric([command, str(code) if code >= 0 else "other"],
                                float(count))
        yield requests
        latency = HistogramMetricFamily(
            PREFIX + "cni_request_duration_seconds",
            "Time to answer a CNI ADD or DEL.", labels=["command"])
        for command in TIMED_COMMANDS:
            counts, total, _ = self.state.cni_latency(command)
            cumulative, running = [], 0
            for bound, n in zip(LATENCY_BUCKETS, counts, strict=True):
                running += n
                cumulative.append((_bound(bound), float(running)))
            latency.add_metric([command], cumulative, sum_value=total)
        yield latency

    def _network(self) -> Iterator[Metric]:
        """The CNI role: what STATUS answers, the record's writes and the
        pods whose port is lost (a count: no pod names in labels); the
        controller's network judge: its verdicts (series bounded: fixed
        labels, and one per node in a local fault, at most half the
        cluster and :data:`~kuryr_supervisor.state.netverdicts.MAX_ROWS`)."""
        if Component.SERVER in self.state.active:
            code, _, _ = self.state.cni_status.answer()
            yield GaugeMetricFamily(PREFIX + "cni_status_code",
                                    "The code CNI STATUS answers now (0, "
                                    "50 or 51).", value=float(code))
            ok, failed = self.state.cni_status.writes()
            writes = CounterMetricFamily(
                PREFIX + "network_record_writes",
                "API writes of this node's NodeNetwork record.",
                labels=["result"])
            writes.add_metric(["ok"], float(ok))
            writes.add_metric(["failed"], float(failed))
            yield writes
            yield GaugeMetricFamily(
                PREFIX + "pod_ports_lost",
                "This node's pods whose Neutron port was made again and "
                "whose interface cannot be pointed at it (no network; "
                "delete them: see their Event PortLost).",
                value=float(self.state.lost_ports.read().count))
        figures = self.state.verdicts.read()
        if figures is None:
            return
        cluster = GaugeMetricFamily(
            PREFIX + "network_cluster_fault",
            "1 while most nodes have network trouble at once (the cloud's "
            "fault, by its most likely kind); no Node condition changes.",
            labels=["kind"])
        for i, kind in enumerate(KINDS):
            cluster.add_metric([kind], float(figures.cluster
                                             and figures.kind == i))
        yield cluster
        nodes = GaugeMetricFamily(PREFIX + "network_nodes",
                                  "Nodes judged, by verdict.",
                                  labels=["verdict"])
        nodes.add_metric(["healthy"], figures.healthy)
        nodes.add_metric(["local_fault"], figures.faulty)
        nodes.add_metric(["suspect"], figures.suspect)
        yield nodes
        yield GaugeMetricFamily(PREFIX + "network_troubled_nodes",
                                "Nodes with network trouble now (a "
                                "symptom, or probes failing unexplained).",
                                value=figures.troubled)
        local = GaugeMetricFamily(
            PREFIX + "network_node_local_fault",
            "1 for each node in a local network fault, with its reason.",
            labels=["node", "reason"])
        for node, reason in figures.faults:
            local.add_metric([node, REASONS[reason] if reason < len(REASONS)
                              else "other"], 1.0)
        yield local

    def _watch_and_ipam(self) -> Iterator[Metric]:
        relists, errors = self.state.watch_counts()
        yield CounterMetricFamily(PREFIX + "watch_relists",
                                  "Complete lists of this node's pods.",
                                  value=float(relists))
        failed = CounterMetricFamily(PREFIX + "watch_errors",
                                     "Failed pod lists or watches, by kind.",
                                     labels=["kind"])
        for kind, count in errors.items():
            failed.add_metric([kind], float(count))
        yield failed
        size, used = self.state.ipam_pool()
        if size is not None:
            yield GaugeMetricFamily(PREFIX + "ipam_pool_addresses",
                                    "Addresses the IPAM pool can hand out.",
                                    value=float(size))
        yield GaugeMetricFamily(PREFIX + "ipam_allocated_addresses",
                                "Addresses allocated to pods.",
                                value=float(used))


def _labelled(family: type[GaugeMetricFamily] | type[CounterMetricFamily],
              name: str, doc: str, label: str, names: Iterable[str],
              figures: dict[str, float], prefix: str) -> Metric:
    """One family whose series are ``names`` under ``label`` (a fixed
    set, so bounded whatever the cluster), each valued from ``figures``
    at ``prefix`` + its name."""
    metric = family(PREFIX + name, doc, labels=[label])
    for each in names:
        metric.add_metric([each], figures[prefix + each])
    return metric


def _services(figures: dict[str, float]) -> Iterator[Metric]:
    """The ``services`` handler's figures (:mod:`~kuryr_supervisor.state.
    lbstats`): fixed labels, so the series are bounded whatever the
    cluster."""
    yield _labelled(
        GaugeMetricFamily, "services_load_balancers",
        "The cluster's Octavia load balancers, by provisioning status.",
        "status", lbstats.STATES, figures, "lb_")
    yield _labelled(
        GaugeMetricFamily, "services", "Kubernetes Services, by what the "
        "handler makes of them (wanted: a load balancer; pending: a change "
        "under way; skipped: headless, ExternalName or no IPv4 clusterIP).",
        "state", lbstats.SERVICES, figures, "services_")
    yield _labelled(
        CounterMetricFamily, "services_octavia_writes",
        "Writes sent to Octavia, by kind.", "kind", lbstats.WRITES,
        figures, "writes_")
    yield CounterMetricFamily(
        PREFIX + "services_octavia_refusals", "Writes Octavia refused (a "
        "VIP in use, a quota met): told in an Event on the Service.",
        value=figures["refusals"])
    yield CounterMetricFamily(
        PREFIX + "services_load_balancer_errors", "Load balancers seen in "
        "provisioning status ERROR (made again with backoff).",
        value=figures["errors"])


def _policies(figures: dict[str, float]) -> Iterator[Metric]:
    """The ``network_policy`` handler's figures (:mod:`~kuryr_supervisor.
    state.policystats`): fixed labels, bounded whatever the cluster."""
    yield _labelled(
        GaugeMetricFamily, "network_policies", "NetworkPolicies by state "
        "(applied: Neutron holds what each asks; pending: something waits; "
        "failed: Neutron refuses something, told in a PolicyFailed Event).",
        "state", policystats.STATES, figures, "policies_")
    yield _labelled(
        CounterMetricFamily, "network_policy_neutron_writes",
        "Writes sent to Neutron for NetworkPolicies, by kind.", "kind",
        policystats.WRITES, figures, "writes_")
    yield CounterMetricFamily(
        PREFIX + "network_policy_neutron_refusals", "Passes in which Neutron "
        "refused something NetworkPolicies need (a quota met, a conflict).",
        value=figures["refusals"])
    yield GaugeMetricFamily(
        PREFIX + "network_policy_neutron_up", "1 while Neutron answers the "
        "NetworkPolicy calls and refuses none of them.",
        value=1.0 if figures["neutron"] == 0 else 0.0)


#: Labels of the port pools' series: the pool key and its node.
LABELS = ["pool", "node"]


def _pools(rows: list[dict[str, Any]]) -> Iterator[Metric]:
    """Each port pool's figures (the controller's neutron_port handler):
    one series per pool and figure, pools per node (``node`` label, ""
    for the unbound pool), so bounded by the cluster's nodes (and by
    :data:`~kuryr_supervisor.state.poolstats.MAX_POOLS`)."""
    if not rows:
        return
    free = GaugeMetricFamily(PREFIX + "port_pool_free_ports",
                             "Free ports in the pool.", labels=LABELS)
    creating = GaugeMetricFamily(PREFIX + "port_pool_creating_ports",
                                 "Pool ports being made.", labels=LABELS)
    low = GaugeMetricFamily(PREFIX + "port_pool_low_water_ports",
                            "Refill below this many free ports.",
                            labels=LABELS)
    high = GaugeMetricFamily(PREFIX + "port_pool_high_water_ports",
                             "Never more free ports than this.",
                             labels=LABELS)
    hits = CounterMetricFamily(PREFIX + "port_pool_hits",
                               "Pods given a port from the pool.",
                               labels=LABELS)
    misses = CounterMetricFamily(PREFIX + "port_pool_misses",
                                 "Pods that found the pool empty.",
                                 labels=LABELS)
    given = CounterMetricFamily(PREFIX + "port_pool_given_back",
                                "Pool ports deleted (pool shrunk or off).",
                                labels=LABELS)
    for row in rows:
        label = [row["pool"], row.get("node", "")]
        free.add_metric(label, row["free"])
        creating.add_metric(label, row["creating"])
        low.add_metric(label, row["low"])
        high.add_metric(label, row["high"])
        hits.add_metric(label, row["hits"])
        misses.add_metric(label, row["misses"])
        given.add_metric(label, row["given_back"])
    yield from (free, creating, low, high, hits, misses, given)


def _canary(doc: dict[str, Any] | None) -> Iterator[Metric]:
    """The node's canary: up, its rounds and CPU, what it reached (series
    bounded: one per peer of the controller's sample, at most 64, and per
    protocol)."""
    up = GaugeMetricFamily(PREFIX + "canary_up", "1 while the node's "
                           "canary is plugged and installed (no sample on "
                           "a node without one).")
    if doc is None:
        yield up
        return
    up.add_metric([], 1.0 if doc["up"] else 0.0)
    yield up
    yield CounterMetricFamily(PREFIX + "canary_probe_rounds",
                              "Rounds of probes the canary ran.",
                              value=float(doc["rounds"]))
    yield CounterMetricFamily(PREFIX + "canary_cpu_seconds",
                              "CPU the canary's threads spent (its agent, "
                              "prober and responder).",
                              value=float(doc["cpuSeconds"]))
    yield GaugeMetricFamily(PREFIX + "canary_probe_interval_seconds",
                            "Seconds between two rounds (0: not probing).",
                            value=float(doc["interval"] or 0))
    reached = GaugeMetricFamily(
        PREFIX + "canary_reached", "1 when the last round reached the "
        "target (the gateway, the canary Service's VIP: service, or a "
        "peer's canary) by that protocol.",
        labels=["target", "protocol"])
    latency = GaugeMetricFamily(
        PREFIX + "canary_latency_seconds", "Round trip of the last probe "
        "that reached the target.", labels=["target"])
    targets = ([("gateway", doc["gateway"])] if doc["gateway"] else []) + \
        ([("service", doc["service"])] if doc.get("service") else []) + \
        [(p["node"], p) for p in doc["peers"]]
    for name, probe in targets:
        for protocol in ("icmp", "tcp"):
            if probe[protocol] is not None:
                reached.add_metric([name, protocol],
                                   1.0 if probe[protocol] else 0.0)
        if probe["latencyMs"] is not None:
            latency.add_metric([name], probe["latencyMs"] / 1000)
    yield reached
    yield latency
    peers = GaugeMetricFamily(PREFIX + "canary_peers", "Peers of the last "
                              "round, reached or not.", labels=["state"])
    for state in ("reached", "unreached"):
        peers.add_metric([state], float(sum(
            (p["reached"] == (state == "reached")) for p in doc["peers"])))
    yield peers


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


class IpamSampler:
    """Reads the IPAM pool's size and use (read-only SQLite) for /metrics.

    Called from the HealthManager's check timer, never a request path. The
    size is known from [ipam] unless the pool is the Node's podCIDR, which
    only the Server learns."""

    def __init__(self, state: SharedState, conf: cfg.ConfigOpts) -> None:
        self.state = state
        settings = ipam_conf.settings(conf)
        self.path = settings.db_path
        self.size: int | None = None if conf.ipam.use_node_pod_cidr else \
            ipam_store.pool_size(settings.subnet, settings.gateway,
                                 settings.range_start, settings.range_end)

    def sample(self) -> None:
        self.state.set_ipam_pool(self.size,
                                 ipam_store.allocated_count(self.path))


class MetricsApp:
    """WSGI: ``/metrics`` and nothing else (the ``[metrics]`` listener)."""

    def __init__(self, exporter: MetricsExporter) -> None:
        self.exporter = exporter

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        request = Request(environ)
        if request.path != "/metrics":
            response = Response("not found\n", status=404, mimetype="text/plain")
        elif request.method not in ("GET", "HEAD"):
            response = Response("method not allowed\n", status=405,
                                mimetype="text/plain", headers={"Allow": "GET"})
        else:
            try:
                payload, content_type = self.exporter.render()
            except Exception:  # noqa: BLE001 - an answer, never a traceback
                LOG.exception("rendering /metrics failed")
                response = Response("error\n", status=500, mimetype="text/plain")
            else:
                response = Response(payload, content_type=content_type,
                                    headers={"Cache-Control": "no-store"})
        return response(environ, start_response)


class MetricsExporter:
    """A private registry holding the health collector; renders the text."""

    def __init__(self, state: SharedState, monitor: HealthMonitor,
                 network: NetworkStatus | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(HealthCollector(state, monitor, network))

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE
