"""/metrics of a real daemon on its own listener: the figures operators
graph move with real CNI traffic and real worker deaths."""
from __future__ import annotations

import http.client
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.daemon import Daemon, wait_until
from tests.functional.cni_harness import Namespaces, install_shim, run_shim

pytestmark = pytest.mark.privileged

P = "kuryr_supervisor_"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    workdir = tmp_path / "d"
    workdir.mkdir()
    d = Daemon(workdir).start()
    yield d
    d.close()


def scrape(port: int, path: str = "/metrics") -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def samples(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    code, text = scrape(port)
    assert code == 200, text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_figures_follow_real_traffic(daemon: Daemon, tmp_path: Path,
                                     namespaces: Namespaces) -> None:
    daemon.wait_ready()
    assert scrape(daemon.metrics_port, "/status")[0] == 404
    before = samples(daemon.metrics_port)
    version = daemon.status()["version"]
    assert before[(P + "build_info", (("version", version),))] == 1
    pool = before[(P + "ipam_pool_addresses", ())]
    assert pool == 253                                  # a /24 less the gateway
    shim = install_shim(str(tmp_path))
    netconf = {"cniVersion": "1.0.0", "name": "kuryr", "type": "kuryr-cni",
               "daemon_socket": f"unix://{daemon.socket_path}"}
    netns = f"/run/netns/{namespaces.create()}"
    code, result = run_shim(shim, "ADD", netconf, container_id="metrics0001",
                            netns=netns)
    assert code == 0, result
    used = (P + "ipam_allocated_addresses", ())
    wait_until(lambda: samples(daemon.metrics_port)[used] == 1, 10)
    code, _ = run_shim(shim, "DEL", netconf, container_id="metrics0001",
                       netns=netns)
    assert code == 0
    wait_until(lambda: samples(daemon.metrics_port)[used] == 0, 10)
    m = samples(daemon.metrics_port)
    assert m[(P + "cni_requests_total", (("code", "0"), ("command", "ADD")))] == 1
    assert m[(P + "cni_requests_total", (("code", "0"), ("command", "DEL")))] == 1
    assert m[(P + "cni_request_duration_seconds_count",
              (("command", "ADD"),))] == 1
    assert 0 < m[(P + "cni_request_duration_seconds_sum",
                  (("command", "ADD"),))] < 30

    server = daemon.worker_pids()["server"]
    os.kill(server, signal.SIGKILL)
    key = (P + "worker_restarts_total",
           (("cause", "killed"), ("component", "server")))
    wait_until(lambda: samples(daemon.metrics_port).get(key) == 1, 20)
    # The counters live in shared memory: the new Server kept them.
    m = samples(daemon.metrics_port)
    assert m[(P + "cni_requests_total", (("code", "0"), ("command", "ADD")))] == 1
