"""The Prometheus exposition, parsed back with prometheus_client's parser."""
from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
from oslo_config import cfg
from prometheus_client.parser import text_string_to_metric_families
from werkzeug.test import Client

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.health.checks import default_checks
from kuryr_supervisor.health.metrics import IpamSampler, MetricsApp, MetricsExporter
from kuryr_supervisor.health.monitor import HealthMonitor
from kuryr_supervisor.state import CNI_COMPONENTS, Component, Reason, SharedState
from kuryr_supervisor.state.components import controller_components

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


def build(active: tuple[Component, ...] = CNI_COMPONENTS
          ) -> tuple[SharedState, HealthMonitor, MetricsExporter, Clock]:
    clock = Clock(100.0)
    state = SharedState.create(multiprocessing.get_context("fork"), clock=clock,
                               active=active)
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
    state.mark_down(Component.WATCHER, Reason.STALE, -9)
    state.count_restart(Component.WATCHER)
    state.record_restart_cause(Component.WATCHER, Reason.KILLED)
    state.count_restart(Component.WATCHER)
    state.record_restart_cause(Component.WATCHER, Reason.STALE)
    state.record_cni_failure()
    state.set_server_load(3, 64)
    clock.t += 2.5
    m = scrape(exporter)
    P = "kuryr_supervisor_"
    watcher = (("component", "watcher"),)
    server = (("component", "server"),)
    assert m[(P + "worker_up", watcher)] == 0
    assert m[(P + "worker_up", server)] == 1
    assert m[(P + "worker_restarts_total",
              (("cause", "killed"), ("component", "watcher")))] == 1
    assert m[(P + "worker_restarts_total",
              (("cause", "stale"), ("component", "watcher")))] == 1
    assert m[(P + "worker_restarts_total",
              (("cause", "memory"), ("component", "server")))] == 0
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



def test_operator_figures() -> None:
    """CNI requests by command and code, the ADD/DEL latency histogram, the
    watch's relists and errors, the IPAM pool and the build's version."""
    state, _, exporter, _ = build()
    state.record_cni_request("ADD", 0, 0.004)
    state.record_cni_request("ADD", 0, 0.3)
    state.record_cni_request("ADD", 100, 2.0)
    state.record_cni_request("DEL", 0, 0.02)
    state.record_cni_request("VERSION", 0, 0.001)
    state.record_cni_request("unknown", 6)
    state.record_cni_request("ADD", 999, 0.01)          # not a known code
    state.record_watch_relist()
    state.record_watch_relist()
    state.record_watch_error("gone")
    state.record_watch_error("temporary")
    state.record_watch_error("temporary")
    state.set_ipam_pool(253, 7)
    m = scrape(exporter)
    P = "kuryr_supervisor_"

    def req(command: str, code: str) -> float:
        return m[(P + "cni_requests_total",
                  (("code", code), ("command", command)))]
    assert req("ADD", "0") == 2 and req("ADD", "100") == 1
    assert req("ADD", "other") == 1 and req("DEL", "0") == 1
    assert req("VERSION", "0") == 1 and req("unknown", "6") == 1
    assert (P + "cni_requests_total", (("code", "0"), ("command", "GC"))) not in m

    def bucket(command: str, le: str) -> float:
        return m[(P + "cni_request_duration_seconds_bucket",
                  (("command", command), ("le", le)))]
    assert bucket("ADD", "0.005") == 1
    assert bucket("ADD", "0.25") == 2              # 0.01 joined below 0.025
    assert bucket("ADD", "0.5") == 3
    assert bucket("ADD", "2.5") == 4 == bucket("ADD", "+Inf")
    assert m[(P + "cni_request_duration_seconds_count",
              (("command", "ADD"),))] == 4
    assert m[(P + "cni_request_duration_seconds_sum",
              (("command", "ADD"),))] == pytest.approx(2.314)
    assert bucket("DEL", "0.025") == 1 and bucket("DEL", "0.01") == 0
    assert m[(P + "watch_relists_total", ())] == 2
    assert m[(P + "watch_errors_total", (("kind", "gone"),))] == 1
    assert m[(P + "watch_errors_total", (("kind", "temporary"),))] == 2
    assert m[(P + "ipam_pool_addresses", ())] == 253
    assert m[(P + "ipam_allocated_addresses", ())] == 7
    assert m[(P + "build_info", (("version", metadata.version(
        "kuryr-supervisor")),))] == 1


def test_ipam_sampler_reads_the_store(tmp_path: Path) -> None:
    import ipaddress

    from kuryr_supervisor.cni.ipam import IpamStore, PodRef
    state, _, exporter, _ = build()
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([])
    conf.set_override("state_dir", str(tmp_path), "ipam")
    conf.set_override("subnet", "10.9.0.0/24", "ipam")
    conf.set_override("range_start", "10.9.0.10", "ipam")
    conf.set_override("range_end", "10.9.0.19", "ipam")
    sampler = IpamSampler(state, conf)
    sampler.sample()                           # no file yet: none used
    assert state.ipam_pool() == (10, 0)
    assert not list(tmp_path.iterdir())        # and none created
    store = IpamStore(sampler.path, ipaddress.IPv4Network("10.9.0.0/24"),
                      range_start=ipaddress.IPv4Address("10.9.0.10"),
                      range_end=ipaddress.IPv4Address("10.9.0.19"))
    pod = PodRef("ns", "p", "uid")
    for i in range(3):
        store.allocate(f"c{i}", "eth0", netns="/run/netns/x", pod=pod)
    store.release("c1", "eth0")
    sampler.sample()
    assert state.ipam_pool() == (10, 2)
    m = scrape(exporter)
    assert m[("kuryr_supervisor_ipam_allocated_addresses", ())] == 2


def test_metrics_app_serves_only_metrics() -> None:
    exporter = build()[2]
    client = Client(MetricsApp(exporter))
    response = client.get("/metrics")
    assert response.status_code == 200
    assert b"kuryr_supervisor_build_info" in response.data
    for path in ("/status", "/ready", "/alive", "/startup", "/"):
        assert client.get(path).status_code == 404
    assert client.post("/metrics").status_code == 405


def test_services_figures_only_where_the_services_handler_runs() -> None:
    state, monitor, exporter, _ = build(controller_components(["services"]))
    board = state.load_balancers
    board.gauges({"active": 3, "error": 1}, {"wanted": 4, "skipped": 2})
    for kind in ("create", "create", "members", "unknown-kind"):
        board.wrote(kind)
    board.count("refusals")
    got = scrape(exporter)
    prefix = "kuryr_supervisor_services"
    assert got[(f"{prefix}_load_balancers", (("status", "active"),))] == 3
    assert got[(f"{prefix}_load_balancers", (("status", "error"),))] == 1
    assert got[(f"{prefix}_load_balancers", (("status", "pending"),))] == 0
    assert got[(prefix, (("state", "wanted"),))] == 4
    assert got[(prefix, (("state", "skipped"),))] == 2
    assert got[(f"{prefix}_octavia_writes_total", (("kind", "create"),))] == 2
    assert got[(f"{prefix}_octavia_writes_total", (("kind", "members"),))] == 1
    assert not [k for k in got if k[1] == (("kind", "unknown-kind"),)]
    assert got[(f"{prefix}_octavia_refusals_total", ())] == 1
    assert got[(f"{prefix}_load_balancer_errors_total", ())] == 0
    # A controller without the handler, and the CNI role, say nothing of it.
    for active in (controller_components(["neutron_port"]), CNI_COMPONENTS):
        _, _, other, _ = build(active)
        assert not [k for k in scrape(other) if k[0].startswith(prefix)]


def test_promtool_check_metrics() -> None:
    """Names, types, units and help by Prometheus's own linter. The test
    command installs promtool (Debian's ``prometheus``); where the suite must
    run everything (tox, CI) its absence is a failure, elsewhere a skip."""
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("KURYR_SUPERVISOR_REQUIRE_PRIVILEGED") == "1":
            pytest.fail("promtool missing: apt-get install prometheus")
        pytest.skip("promtool not installed (Debian package prometheus)")
    state, monitor, exporter, _ = build()
    monitor.tick()
    state.record_cni_request("ADD", 0, 0.01)
    state.record_restart_cause(Component.SERVER, Reason.KILLED)
    state.set_ipam_pool(10, 1)
    # The controller's with the services handler too.
    _, services_monitor, services, _ = build(controller_components(["services"]))
    services_monitor.tick()
    family = b"kuryr_supervisor_services"

    def named(line: bytes) -> bytes:      # "# HELP <name> ...", "<name>{...} v"
        return line.split(b" ")[2] if line.startswith(b"#") else line
    payload = exporter.render()[0] + b"".join(
        line + b"\n" for line in services.render()[0].splitlines()
        if named(line).startswith(family))
    assert payload.count(b"# TYPE kuryr_supervisor_services") == 5
    done = subprocess.run([promtool, "check", "metrics"], input=payload,
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not done.stdout.strip() and not done.stderr.strip(), \
        done.stdout + done.stderr
