"""The controller role at (small) scale: a real controller daemon against
the Kubernetes API, Keystone and Neutron fakes over real HTTP.

- 50 pods present at start get their ports in two bulk creates (10 to
  measure Neutron, then the rest); a restart
  makes no write to Neutron and none to the PodPorts (their statuses
  included).
- The controller-scale benchmark's own phases at 300 pods (the code the
  benchmark runs): every pod one port, request counts; no timing asserted.

Fake only: the bulk sizes follow the fake's time per port, and 300 pods
would take the real Neutron minutes. A restart that writes nothing against
the real cloud: test_controller_realcloud.py.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.fixtures.controller import Cloud, cloud_fixture, controller_daemon
from tests.fixtures.daemon import wait_until

pytestmark = pytest.mark.privileged

cloud = pytest.fixture(cloud_fixture)
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def podport_writes(cloud: Cloud, since: float) -> int:
    return sum(1 for at, method, path, _ in list(cloud.api.requests)
               if at >= since and method in WRITES and "/podports" in path)


def neutron_writes(cloud: Cloud, since: float) -> dict[str, int]:
    return {k: n for k, n in cloud.neutron.counts(since).items()
            if k.split()[0] in WRITES}


def test_restart_writes_nothing(tmp_path: Path, cloud: Cloud) -> None:
    pods = [cloud.api.add_pod(f"ns{i % 3}", f"p{i}", "node-a") for i in range(50)]
    d = controller_daemon(tmp_path, cloud)
    d.start()
    try:
        wait_until(lambda: len(cloud.api.podports) == 50, 30)
        # 10 alone measure Neutron, then the rest in one request
        assert neutron_writes(cloud, 0) == {"POST /v2.0/ports": 2}
        assert cloud.neutron.bulk_sizes == [10, 40]
        for pod in pods:
            assert len(cloud.neutron.ports_for(pod["metadata"]["uid"])) == 1
        # ...and their ports' statuses (ACTIVE at once in the fake),
        # written as the ports are made.
        wait_until(lambda: all((o.get("status") or {}).get("portStatus")
                               for o in cloud.api.podports.values()), 30)
        d.close()
        wall, mono = time.time(), time.monotonic()
        d.start()
        d.wait_ready()

        def lists_since_restart() -> int:
            return sum(1 for at, method, path in list(cloud.neutron.requests)
                       if at >= wall and method == "GET"
                       and path == "/v2.0/ports")
        # the handler is ready once its first list is applied; one more
        # resync (resync_interval = 2 s in these tests) must not write either
        wait_until(lambda: lists_since_restart() >= 2, 30)
        assert neutron_writes(cloud, wall) == {}
        assert podport_writes(cloud, mono) == 0
        assert d.status()["handlerFailures"] == 0
    finally:
        d.close()


def test_scale_benchmark_phases(tmp_path: Path) -> None:
    """The benchmark's scenario, short: what it counts is what happened."""
    from benchmarks.controller_scale import scenario, writes
    from benchmarks.harness import Workspace
    ws = Workspace()
    try:
        r = scenario(ws, 300, 30, timeout=120)
    finally:
        ws.close()
    assert r["all_ported_after"] and r["ports_total"] == 330
    start = r["start_neutron"]
    assert start["POST /v2.0/ports"] == 4         # 10 to measure, then 100 a request
    assert sum(start.values()) / 300 <= 1.1
    assert 1 <= r["burst_neutron"]["POST /v2.0/ports"] <= 30
    assert sum(r["burst_bulk_sizes"]) == 30
    assert writes(r["relist_neutron"]) == 0 and writes(r["relist_k8s"]) == 0
    assert writes(r["restart_neutron"]) == 0 and writes(r["restart_k8s"]) == 0
    assert len(r["burst_s"]) == 30
