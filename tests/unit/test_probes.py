"""The probe app through werkzeug's test client (no socket), real SharedState."""
from __future__ import annotations

import datetime
import json
import multiprocessing
import signal
from importlib import metadata
from pathlib import Path

import pytest
from oslo_config import cfg
from werkzeug.test import Client

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.health.checks import default_checks
from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort
from kuryr_supervisor.health.monitor import HealthMonitor
from kuryr_supervisor.health.probes import ProbeApp, iso
from kuryr_supervisor.state import CNI_COMPONENTS, Component, Reason, SharedState

FIXTURES = Path(__file__).parent.parent / "fixtures"


class Switch(Check):
    """An I/O check whose result the test flips (stands in for k8s-api)."""

    name = "k8s-api"
    kind = Kind.READINESS
    sort = Sort.IO

    def __init__(self) -> None:
        self.result = Result.passed("API answered /readyz")

    def run(self, now: float) -> Result:
        return self.result


class Env:
    def __init__(self) -> None:
        self.state = SharedState.create(multiprocessing.get_context("fork"))
        self.conf = cfg.ConfigOpts()
        conf_mod.register_opts(self.conf)
        self.conf([])
        self.api = Switch()
        # The master is fixture pid 1001 (cgroup v2, 212 MiB); every worker
        # is fixture pid 2001 (CAP_NET_ADMIN effective).
        checks = default_checks(self.state, self.conf, 1001,
                                probe=lambda: None, extra=[self.api],
                                proc_root=str(FIXTURES / "proc"),
                                cgroup_root=str(FIXTURES / "cgroup" / "v2"))
        self.monitor = HealthMonitor(self.state, self.conf, checks)
        self.app = ProbeApp(self.monitor, self.state)
        self.client = Client(self.app)

    def healthy(self) -> Env:
        for comp in CNI_COMPONENTS:
            self.state.register(comp, 2001)
            self.state.set_ready(comp, True)
        self.monitor.tick()
        return self

    def get(self, url: str) -> tuple[int, str]:
        response = self.client.get(url)
        return response.status_code, response.get_data(as_text=True)


@pytest.fixture
def env() -> Env:
    return Env().healthy()


def test_all_green(env: Env) -> None:
    for path in ("/alive", "/ready", "/startup"):
        assert env.get(path) == (200, "ok\n")


def test_dead_worker_named_in_alive(env: Env) -> None:
    env.state.mark_down(Component.SERVER, Reason.STALE, -signal.SIGKILL)
    code, body = env.get("/alive")
    assert code == 503
    assert body == ("[-]server failed: server dead: killed after missing its "
                    "heartbeat deadline, restarting\nlivez check failed\n")


def test_a_worker_being_restarted_is_named_in_ready_not_alive(
        env: Env) -> None:
    env.state.mark_down(Component.SERVER, Reason.KILLED, -signal.SIGKILL)
    assert env.get("/alive")[0] == 200
    code, body = env.get("/alive?verbose")
    assert code == 200 and "[+]server ok" in body.splitlines()
    code, body = env.get("/ready")
    assert code == 503
    assert "server not running: killed by SIGKILL" in body


def test_verbose_lists_every_check(env: Env) -> None:
    env.state.set_server_load(64, 64)
    code, body = env.get("/ready?verbose")
    assert code == 503
    assert body.splitlines() == [
        "[+]net-admin ok",
        "[+]watcher-synced ok",
        "[+]server-accepting ok",
        "[+]cni-environment ok",
        "[+]cni-install ok",
        "[-]server-capacity failed: server saturated: 64/64 in flight",
        "[+]draining ok",
        "[+]k8s-api ok",
        "readyz check failed",
    ]
    code, body = env.get("/alive?verbose=1")
    assert code == 200
    assert body.splitlines()[-1] == "livez check passed"
    assert "[+]checker ok" in body.splitlines()


def test_exclude_skips_checks(env: Env) -> None:
    env.state.set_draining()
    env.api.result = Result.failed("k8s API unreachable: connection refused")
    env.monitor.tick()
    assert env.get("/ready")[0] == 503
    assert env.get("/ready?exclude=draining")[0] == 503
    code, body = env.get("/ready?exclude=draining&exclude=k8s-api&verbose")
    assert code == 200
    assert "[+]draining excluded: ok" in body
    assert "[+]k8s-api excluded: ok" in body
    assert body.endswith("readyz check passed\n")


def test_single_check_paths(env: Env) -> None:
    assert env.get("/alive/netlink") == (200, "ok\n")
    assert env.get("/ready/k8s-api") == (200, "ok\n")
    assert env.get("/ready/k8s-api?verbose") == (
        200, "[+]k8s-api ok: API answered /readyz\n")
    env.state.record_cni_failure()
    for _ in range(2):
        env.state.record_cni_failure()
    assert env.get("/alive/cni-failures") == (
        503, "[-]cni-failures failed: 3 consecutive CNI ADD failures "
             "(limit 3)\n")
    assert env.get("/ready")[0] == 200      # a liveness matter only
    assert env.get("/ready/netlink")[0] == 404   # wrong kind
    assert env.get("/alive/draining")[0] == 404
    code, body = env.get("/alive/nope")
    assert code == 404
    assert "nope" in body


def test_startup_waits_for_first_ready() -> None:
    env = Env()
    env.monitor.tick()
    code, body = env.get("/startup")
    assert code == 503
    assert body.startswith("[-]started failed: not ready yet (not live: ")
    env.healthy()
    assert env.get("/startup") == (200, "ok\n")
    env.state.set_draining()
    env.monitor.tick()
    assert env.get("/startup") == (200, "ok\n")     # once ready, started
    assert env.get("/ready")[0] == 503


def test_status_document(env: Env) -> None:
    env.state.mark_down(Component.WATCHER, Reason.KILLED, -signal.SIGKILL)
    env.state.count_restart(Component.WATCHER)
    env.state.set_memory(Component.SERVER, 12345)
    response = env.client.get("/status")
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    doc = json.loads(response.get_data(as_text=True))
    # Being restarted: live (the supervisor heals it), not ready, and why.
    assert doc["live"] is True and doc["ready"] is False
    assert doc["started"] is True
    assert doc["version"] == metadata.version("kuryr-supervisor")
    assert doc["cause"] == "none"
    assert doc["summary"].startswith("live, not ready: ")
    assert "watcher not running: killed by SIGKILL" in doc["summary"]
    assert doc["checks"]["watcher"]["message"] == (
        "watcher dead: killed by SIGKILL, restarting (restart #1, within "
        "the restart budget)")
    watcher = doc["components"]["watcher"]
    assert watcher["state"] == "dead"
    assert watcher["reason"] == "killed"
    assert watcher["restarts"] == 1
    assert watcher["exitCode"] == -9
    server = doc["components"]["server"]
    assert server["state"] == "running"
    assert server["pid"] == 2001
    assert server["memory"] == 12345
    assert 0 <= server["heartbeatAge"] < 5
    for key in ("since", "updatedAt", "startedAt"):
        assert server[key].endswith("Z")
        datetime.datetime.fromisoformat(server[key])
    net = doc["checks"]["netlink"]
    assert (net["kind"], net["state"]) == ("liveness", "ok")
    assert set(net) == {"kind", "state", "message", "since", "updatedAt"}
    assert doc["checks"]["watcher-synced"]["state"] == "failed"
    assert set(doc["checks"]) >= {"netlink", "memory", "net-admin",
                                  "k8s-api", "checker", "draining"}


def test_status_budgets(env: Env) -> None:
    """Each budget's use and the running daemon's limit (for ``status``)."""
    env.conf.set_override("cni_failures_count", 2, "cni_daemon")
    env.state.count_restart(Component.SERVER)
    env.state.count_restart(Component.WATCHER)
    env.state.record_cni_failure()
    budgets = json.loads(env.get("/status")[1])["budgets"]
    assert budgets["cniFailures"] == {"count": 1, "limit": 2}
    restarts = budgets["restarts"]
    assert restarts["total"] == 2 and restarts["exhausted"] is False
    assert restarts["max"] == env.conf.supervisor.max_restarts
    assert restarts["window"] == env.conf.supervisor.restart_window
    env.state.set_restart_budget_exceeded(True)
    budgets = json.loads(env.get("/status")[1])["budgets"]
    assert budgets["restarts"]["exhausted"] is True
    assert "handlerFailures" not in budgets


def test_status_never_fails_even_before_anything() -> None:
    env = Env()
    response = env.client.get("/status")
    assert response.status_code == 200
    doc = json.loads(response.get_data(as_text=True))
    assert doc["components"]["watcher"]["state"] == "starting"
    assert doc["components"]["watcher"]["heartbeatAge"] is None
    assert doc["checks"]["netlink"]["message"] == "not checked yet"


def test_metrics_endpoint(env: Env) -> None:
    response = env.client.get("/metrics")
    assert response.status_code == 200
    assert response.mimetype == "text/plain"
    assert "kuryr_supervisor_live 1.0" in response.get_data(as_text=True)


def test_unknown_path_and_wrong_method(env: Env) -> None:
    assert env.get("/nope") == (404, "404 Not Found\n")
    assert env.get("/alive/")[0] == 404
    response = env.client.post("/alive")
    assert response.status_code == 405
    assert "GET" in response.headers["Allow"]
    assert env.client.head("/ready").status_code == 200


def test_internal_error_is_plain_500(env: Env) -> None:
    class Broken(ProbeApp):
        def status(self, report):  # type: ignore[no-untyped-def]
            raise RuntimeError("secret detail")
    client = Client(Broken(env.monitor, env.state))
    response = client.get("/status")
    assert response.status_code == 500
    body = response.get_data(as_text=True)
    assert body == "500 Internal Server Error\n"
    assert "Traceback" not in body and "secret" not in body


def test_iso_timestamps() -> None:
    assert iso(0.0) == "1970-01-01T00:00:00.000Z"
    assert iso(1_800_000_000.25) == "2027-01-15T08:00:00.250Z"
    assert iso(None) is None


def test_startup_agrees_with_ready_before_the_next_publish() -> None:
    env = Env().healthy()
    assert env.state.ever_ready()
    fresh = Env()
    for comp in CNI_COMPONENTS:
        fresh.state.register(comp, 2001)
    fresh.monitor.tick()                # published: not ready (not synced)
    for comp in CNI_COMPONENTS:
        fresh.state.set_ready(comp, True)
    assert not fresh.state.ever_ready()  # no publish since
    assert fresh.get("/ready")[0] == 200
    assert fresh.get("/startup") == (200, "ok\n")
