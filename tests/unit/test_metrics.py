"""The Prometheus exposition, parsed back with prometheus_client's parser."""
from __future__ import annotations

import multiprocessing
from pathlib import Path

from oslo_config import cfg
from prometheus_client.parser import text_string_to_metric_families

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.health.checks import default_checks
from kuryr_supervisor.health.metrics import MetricsExporter
from kuryr_supervisor.health.monitor import HealthMonitor
from kuryr_supervisor.state import CNI_COMPONENTS, Component, Reason, SharedState

FIXTURES = Path(__file__).parent.parent / "fixtures"


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def scrape(exporter: MetricsExporter) -> dict[tuple[str, tuple], float]:
    payload, content_type = exporter.render()
    assert content_type.startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(payload.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def build() -> tuple[SharedState, HealthMonitor, MetricsExporter, Clock]:
    clock = Clock(100.0)
    state = SharedState.create(multiprocessing.get_context("fork"), clock=clock)
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([])
    checks = default_checks(state, conf, 1001, probe=lambda: None,
                            proc_root=str(FIXTURES / "proc"),
                            cgroup_root=str(FIXTURES / "cgroup" / "v2"))
    monitor = HealthMonitor(state, conf, checks, uss=lambda pid: 4096)
    return state, monitor, MetricsExporter(state, monitor), clock


def test_figures_are_read_at_scrape_time() -> None:
    state, monitor, exporter, clock = build()
    for comp in CNI_COMPONENTS:
        state.register(comp, 2001)
        state.set_ready(comp, True)
    monitor.tick()
    state.mark_down(Component.WATCHER, Reason.KILLED, -9)
    state.count_restart(Component.WATCHER)
    state.count_restart(Component.WATCHER)
    state.record_cni_failure()
    state.set_server_load(3, 64)
    clock.t += 2.5
    m = scrape(exporter)
    P = "kuryr_supervisor_"
    watcher = (("component", "watcher"),)
    server = (("component", "server"),)
    assert m[(P + "worker_up", watcher)] == 0
    assert m[(P + "worker_up", server)] == 1
    assert m[(P + "worker_restarts_total", watcher)] == 2
    assert m[(P + "worker_heartbeat_age_seconds", server)] == 2.5
    assert m[(P + "worker_memory_uss_bytes", server)] == 4096
    assert m[(P + "daemon_memory_bytes", ())] == 222298112
    assert m[(P + "check_ok", (("check", "watcher"), ("kind", "liveness")))] == 0
    assert m[(P + "check_ok", (("check", "netlink"), ("kind", "liveness")))] == 1
    assert m[(P + "check_ok", (("check", "net-admin"),
                               ("kind", "readiness")))] == 1
    assert m[(P + "cni_consecutive_failures", ())] == 1
    assert m[(P + "server_inflight_requests", ())] == 3
    assert m[(P + "server_capacity_requests", ())] == 64
    assert m[(P + "live", ())] == 0          # the dead watcher, at once
    assert m[(P + "ready", ())] == 0         # watcher-synced fails too


def test_private_registries_do_not_collide() -> None:
    first, second = build()[2], build()[2]
    assert scrape(first).keys() == scrape(second).keys()
    names = {name for name, _ in scrape(first)}
    assert all(n.startswith("kuryr_supervisor_") for n in names)
