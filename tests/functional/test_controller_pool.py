"""Port pools in a real controller daemon: pods take pool ports, the pool
refills, ``/status`` and ``/metrics`` show its figures (written by the
handler process, read by the HealthManager through shared memory), and a
restarted daemon keeps the pool it left."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.controller import Cloud, controller_daemon
from tests.fixtures.daemon import wait_until
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.openstack import FakeKeystone
from tests.fixtures.poolcloud import PooledNeutron

POOL = {"vif_pool": {"enabled": True, "ports_pool_min": 5,
                     "ports_pool_max": 8, "ports_pool_batch": 5,
                     "ports_pool_update_frequency": 0.5}}


@pytest.fixture
def cloud() -> Iterator[Cloud]:
    keystone = FakeKeystone().start()
    neutron = PooledNeutron(keystone, cidr="10.22.0.0/24",
                            gateway="10.22.0.1").start()
    c = Cloud(FakeAPI().start(), keystone, neutron)
    yield c
    c.stop()


def pool_ports(cloud: Cloud) -> int:
    assert isinstance(cloud.neutron, PooledNeutron)
    return len(cloud.neutron.pool_ports())


def test_pool_in_status_and_metrics_and_kept_on_restart(
        tmp_path: Path, cloud: Cloud) -> None:
    d = controller_daemon(tmp_path / "a", cloud, POOL)
    try:
        d.start()
        d.wait_ready(30)
        wait_until(lambda: pool_ports(cloud) == 5, 20)
        pods = [cloud.api.add_pod("ns", f"p{i}", "node-a") for i in range(3)]
        for pod in pods:
            meta = pod["metadata"]
            spec = wait_until(lambda m=meta: cloud.podport("ns", m["name"]), 15)
            [port] = wait_until(
                lambda m=meta: cloud.neutron.ports_for(m["uid"]), 15)
            assert spec["portId"] == port["id"]
            assert "kuryr-supervisor-pool" in port["tags"]   # from the pool
        wait_until(lambda: pool_ports(cloud) >= 5, 20)            # refilled
        row = wait_until(lambda: [r for r in d.status()["pools"]
                                  if r["hits"] == 3 and r["free"] >= 5], 10)[0]
        assert (row["misses"], row["low"], row["high"]) == (0, 5, 8), row
        assert row["pool"].startswith(cloud.neutron.network_id)
        code, body = d.get("/metrics")
        assert code == 200
        hits = [line for line in body.splitlines()
                if line.startswith("kuryr_supervisor_port_pool_hits_total{")]
        assert len(hits) == 1 and hits[0].endswith(" 3.0"), hits
        left = pool_ports(cloud)
        posts = cloud.neutron.counts()["POST /v2.0/ports"]
    finally:
        d.close()
    again = controller_daemon(tmp_path / "b", cloud, POOL)
    try:
        again.start()
        again.wait_ready(30)
        rows = wait_until(lambda: [r for r in again.status()["pools"]
                                   if r["free"] == left], 15)
        assert rows, json.dumps(again.status()["pools"])
        assert cloud.neutron.counts()["POST /v2.0/ports"] == posts
        assert cloud.neutron.counts()["DELETE /v2.0/ports/{id}"] == 0
    finally:
        again.close()
