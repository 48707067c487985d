"""Port pools against a real Keystone and Neutron (MariaDB, several
request threads): one pool per node that runs pods, its ports made in bulk
with their tags and already bound to the node (``binding:host_id``),
taken by pods of that node (their update applied by the real Neutron:
device_id and name), each pool refilled, a restart that keeps every
node's pool and makes no port, and a node left without pods that gives
its pool back. The same against the fakes:
test_controller_pool.py."""
from __future__ import annotations

import collections
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.clouds import controller_options
from tests.fixtures.daemon import Daemon, wait_until
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.realcloud import RealCloud

pytestmark = pytest.mark.realcloud

POOL_DEVICE = "kuryr-supervisor-pool"


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    yield fake
    fake.stop()


def test_pool_on_a_real_neutron(tmp_path: Path, real_cloud: RealCloud,
                                api: FakeAPI) -> None:
    cluster = f"pool-{uuid.uuid4().hex[:8]}"
    tag = f"kuryr-supervisor:{cluster}"
    opts = controller_options(
        real_cloud, api.url,
        controller={"cluster_id": cluster},
        vif_pool={"enabled": True, "ports_pool_min": 3, "ports_pool_max": 5,
                  "ports_pool_batch": 3, "ports_pool_update_frequency": 0.5,
                  "ports_pool_node_idle": 3})

    def by_device() -> collections.Counter[str]:
        return collections.Counter(p["device_id"]
                                   for p in real_cloud.ports(tags=tag))

    def pool_hosts() -> collections.Counter[str]:
        return collections.Counter(
            p["binding:host_id"] for p in real_cloud.ports(
                device_id=POOL_DEVICE, tags=tag))

    nodes = [f"{cluster}-n{i}" for i in range(2)]
    for node in nodes:                      # nodes running pods: pools
        api.add_pod("default", f"{node}-resident", node)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    daemon = Daemon(tmp_path / "a", opts)
    daemon.start()
    try:
        daemon.wait_ready(60)
        # The pools' own count: Neutron shows a bulk's ports before its
        # answer reaches the controller.
        wait_until(lambda: all(r["free"] >= 3 for r in daemon.status()[
            "pools"] if r["node"] in nodes) and len(
                daemon.status()["pools"]) == 2, 120, 0.5)
        pooled = {p["id"]: p["binding:host_id"] for p in real_cloud.ports(
            device_id=POOL_DEVICE, tags=tag)}
        assert set(pooled.values()) == set(nodes)       # bound when made
        assert all("kuryr-supervisor-pool" in p["tags"]
                   for p in real_cloud.ports(device_id=POOL_DEVICE, tags=tag))
        pods = [api.add_pod("default", f"{cluster}-{i}", nodes[i % 2])
                for i in range(3)]
        uids = [p["metadata"]["uid"] for p in pods]
        wait_until(lambda: len(api.podports) >= 5, 30, 0.1)
        wait_until(lambda: all(by_device()[u] == 1 for u in uids), 120, 0.5)
        for pod, uid in zip(pods, uids, strict=True):
            node = pod["spec"]["nodeName"]
            [port] = real_cloud.ports(device_id=uid)
            assert pooled.get(port["id"]) == node       # its node's pool
            assert port["binding:host_id"] == node
            spec = api.podports[("default", pod["metadata"]["name"])]["spec"]
            assert spec["portId"] == port["id"]
        wait_until(lambda: all(pool_hosts()[n] >= 3 for n in nodes), 120, 0.5)

        def rows() -> dict[str, dict[str, Any]] | None:
            got = {r["node"]: r for r in daemon.status()["pools"]}
            return got if [got.get(n, {}).get("hits") for n in nodes] == [
                2, 1] else None
        got = wait_until(rows, 20)
        # Each node's first pod (its resident) found no pool yet: a miss.
        assert [got[n]["misses"] for n in nodes] == [1, 1], got
    finally:
        daemon.close()
    before = pool_hosts()
    again = Daemon(tmp_path / "b", opts)
    again.start()
    try:
        again.wait_ready(60)
        wait_until(lambda: {r["node"]: r["free"] for r in again.status()[
            "pools"]} == dict(before), 60, 0.5)
        assert pool_hosts() == before                   # nothing made
        assert by_device()[POOL_DEVICE] == sum(before.values())
        # A node left without pods gives its pool back (after 3 s idle).
        for name in (f"{nodes[1]}-resident", f"{cluster}-1"):
            api.delete_pod("default", name)
        wait_until(lambda: not pool_hosts()[nodes[1]], 60, 0.5)
        assert pool_hosts()[nodes[0]] == before[nodes[0]]
        wait_until(lambda: [r["node"] for r in again.status()["pools"]] == [
            nodes[0]], 20, 0.5)
    finally:
        again.close()
        # The cloud outlives this test: give its ports back.
        for port in real_cloud.ports(tags=tag):
            real_cloud.admin("DELETE", f"/v2.0/ports/{port['id']}")
