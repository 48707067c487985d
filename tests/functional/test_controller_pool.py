"""Port pools in a real controller daemon: one pool per node that runs
pods, of ports bound to it; pods take their node's pool ports, the pool
refills, ``/status`` and ``/metrics`` show each node's figures (written by
the handler process, read by the HealthManager through shared memory),
and a restarted daemon keeps the pools it left, each on its node. The
same against a real Neutron: test_controller_pool_realcloud.py."""
from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def pool_hosts(cloud: Cloud) -> collections.Counter[str]:
    """Free pool ports per binding:host_id."""
    assert isinstance(cloud.neutron, PooledNeutron)
    return collections.Counter(p.get("binding:host_id", "")
                               for p in cloud.neutron.pool_ports())


def by_node(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["node"]: r for r in rows}


def test_pool_in_status_and_metrics_and_kept_on_restart(
        tmp_path: Path, cloud: Cloud) -> None:
    for node in ("node-a", "node-b"):          # nodes running pods: pools
        cloud.api.add_pod("ns", f"resident-{node}", node)
    d = controller_daemon(tmp_path / "a", cloud, POOL)
    try:
        d.start()
        d.wait_ready(30)
        wait_until(lambda: pool_hosts(cloud) == {"node-a": 5, "node-b": 5},
                   20)
        pods = [cloud.api.add_pod("ns", f"p{i}", "node-b") for i in range(3)]
        for pod in pods:
            meta = pod["metadata"]
            spec = wait_until(lambda m=meta: cloud.podport("ns", m["name"]), 15)
            [port] = wait_until(
                lambda m=meta: cloud.neutron.ports_for(m["uid"]), 15)
            assert spec["portId"] == port["id"]
            assert "kuryr-supervisor-pool" in port["tags"]   # from the pool
            assert port["binding:host_id"] == "node-b"       # its node's
        wait_until(lambda: pool_hosts(cloud)["node-b"] >= 5, 20)  # refilled
        rows = wait_until(lambda: (lambda r: r if "node-b" in r and r[
            "node-b"]["hits"] == 3 and r["node-b"]["free"] >= 5 else None)(
                by_node(d.status()["pools"])), 10)
        # Each node's first pod (the resident) found no pool yet: a miss.
        assert (rows["node-b"]["misses"], rows["node-b"]["low"],
                rows["node-b"]["high"]) == (1, 5, 8), rows
        assert (rows["node-a"]["hits"], rows["node-a"]["misses"],
                rows["node-a"]["free"]) == (0, 1, 5)
        assert rows["node-a"]["pool"].startswith(cloud.neutron.network_id)
        code, body = d.get("/metrics")
        assert code == 200
        hits = sorted(line for line in body.splitlines() if line.startswith(
            "kuryr_supervisor_port_pool_hits_total{"))
        assert len(hits) == 2, hits
        assert 'node="node-a"' in hits[0] and hits[0].endswith(" 0.0")
        assert 'node="node-b"' in hits[1] and hits[1].endswith(" 3.0")
        left = pool_hosts(cloud)
        posts = cloud.neutron.counts()["POST /v2.0/ports"]
    finally:
        d.close()
    again = controller_daemon(tmp_path / "b", cloud, POOL)
    try:
        again.start()
        again.wait_ready(30)
        rows = wait_until(lambda: (lambda r: r if {n: r[n]["free"] for n in r}
                                   == dict(left) else None)(
                                       by_node(again.status()["pools"])), 15)
        assert rows, json.dumps(again.status()["pools"])
        assert cloud.neutron.counts()["POST /v2.0/ports"] == posts
        assert cloud.neutron.counts()["DELETE /v2.0/ports/{id}"] == 0
    finally:
        again.close()
