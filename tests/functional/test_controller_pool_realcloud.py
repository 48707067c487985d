"""Port pools against a real Keystone and Neutron (MariaDB, several
request threads): pool ports made in bulk with their tags, taken by pods
(their update applied by the real Neutron: device_id and binding), the
pool refilled, and a restart that keeps the pool and makes no port."""
from __future__ import annotations

import collections
import uuid
from collections.abc import Iterator
from pathlib import Path

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
        vif_pool={"enabled": True, "ports_pool_min": 6, "ports_pool_max": 9,
                  "ports_pool_batch": 3, "ports_pool_update_frequency": 0.5})

    def by_device() -> collections.Counter[str]:
        return collections.Counter(p["device_id"]
                                   for p in real_cloud.ports(tags=tag))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    daemon = Daemon(tmp_path / "a", opts)
    daemon.start()
    try:
        daemon.wait_ready(60)
        wait_until(lambda: by_device()[POOL_DEVICE] >= 6, 120, 0.5)
        pooled = {p["id"] for p in real_cloud.ports(device_id=POOL_DEVICE,
                                                    tags=tag)}
        assert all("kuryr-supervisor-pool" in p["tags"]
                   for p in real_cloud.ports(device_id=POOL_DEVICE, tags=tag))
        pods = [api.add_pod("default", f"{cluster}-{i}", f"node-{i}")
                for i in range(3)]
        uids = [p["metadata"]["uid"] for p in pods]
        wait_until(lambda: len(api.podports) >= 3, 30, 0.1)
        wait_until(lambda: all(by_device()[u] == 1 for u in uids), 120, 0.5)
        for pod, uid in zip(pods, uids, strict=True):
            [port] = real_cloud.ports(device_id=uid)
            assert port["id"] in pooled                 # from the pool
            assert port["binding:host_id"] == pod["spec"]["nodeName"]
            spec = api.podports[("default", pod["metadata"]["name"])]["spec"]
            assert spec["portId"] == port["id"]
        wait_until(lambda: by_device()[POOL_DEVICE] >= 6, 120, 0.5)
        rows = wait_until(lambda: [r for r in daemon.status()["pools"]
                                   if r["hits"] == 3], 20)
        assert rows[0]["misses"] == 0, rows
    finally:
        daemon.close()
    before = by_device()
    again = Daemon(tmp_path / "b", opts)
    again.start()
    try:
        again.wait_ready(60)
        wait_until(lambda: [r for r in again.status()["pools"]
                            if r["free"] == before[POOL_DEVICE]], 60, 0.5)
        assert by_device() == before                   # nothing made
    finally:
        again.close()
        # The cloud outlives this test: give its ports back.
        for port in real_cloud.ports(tags=tag):
            real_cloud.admin("DELETE", f"/v2.0/ports/{port['id']}")
