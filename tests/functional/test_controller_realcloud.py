"""The controller daemon against a real Keystone and Neutron (Neutron on
MariaDB, several request threads): a burst never gives a pod two ports
and a restart writes nothing; an admin's deletion of a pod's port is
undone with the same address and MAC, bound to the pod's node, the
PodPort naming the new port and nothing else changed; the port's status
reaches the PodPort."""
from __future__ import annotations

import collections
import threading
import time
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


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    yield fake
    fake.stop()


def ours(cloud: RealCloud) -> list[dict[str, Any]]:
    """The pods' ports on the pod network (not the free ports of a pool
    another test left: the cloud is shared by the session)."""
    return [p for p in cloud.ports(network_id=cloud.network_id,
                                   device_owner="compute:kuryr")
            if p["device_id"] != "kuryr-supervisor-pool"]


def test_burst_one_port_each_and_restart_writes_nothing(
        tmp_path: Path, real_cloud: RealCloud, api: FakeAPI) -> None:
    daemon = Daemon(tmp_path, controller_options(real_cloud, api.url))
    most = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.3):
            per = collections.Counter(p["device_id"] for p in ours(real_cloud))
            most[0] = max([most[0], *per.values()])
    sampler = threading.Thread(target=sample, daemon=True)
    daemon.start()
    try:
        daemon.wait_ready(60)
        sampler.start()
        tag = uuid.uuid4().hex[:6]
        pods = [api.add_pod("default", f"b{tag}-{i}", f"node-{i % 3}")
                for i in range(20)]
        uids = {p["metadata"]["uid"] for p in pods}

        def settled() -> bool:
            per = collections.Counter(p["device_id"] for p in ours(real_cloud))
            return len(api.podports) >= 20 and all(per[u] == 1 for u in uids)
        wait_until(settled, 240)
        stop.set()
        sampler.join()
        assert most[0] == 1                       # never two ports for a pod
        ports = {p["id"]: p for p in ours(real_cloud) if p["device_id"] in uids}
        for pod in pods:
            spec = api.podports[("default", pod["metadata"]["name"])]["spec"]
            assert ports[spec["portId"]]["device_id"] == pod["metadata"]["uid"]
            assert ports[spec["portId"]]["binding:host_id"] == pod["spec"]["nodeName"]
        specs = {k: dict(v["spec"]) for k, v in api.podports.items()}
        daemon.close()
        restarted = time.time()
        daemon.start()
        daemon.wait_ready(60)
        time.sleep(12)                            # two resyncs (5 s)
        after = {p["id"]: p["updated_at"] for p in ours(real_cloud)
                 if p["device_id"] in uids}
        assert after.keys() == ports.keys()       # none made, none deleted
        # Neutron's access log: the restarted controller sent reads only.
        sent = [(m, path) for _, m, path, agent in
                real_cloud.neutron_access(restarted)
                if agent.startswith("kuryr-supervisor/")]
        assert sent and all(m == "GET" for m, _ in sent), sent
        assert {k: dict(v["spec"]) for k, v in api.podports.items()} == specs
        # the status subresource says what Neutron says (the test driver
        # binds node-* hosts at once)
        wait_until(lambda: all((v.get("status") or {}).get("portStatus") == "ACTIVE"
                               for v in api.podports.values()), 30)
        assert daemon.status()["handlerFailures"] == 0
    finally:
        stop.set()
        daemon.close()


def test_a_deleted_port_is_made_again_as_it_was(
        tmp_path: Path, real_cloud: RealCloud, api: FakeAPI) -> None:
    daemon = Daemon(tmp_path, controller_options(real_cloud, api.url))
    daemon.start()
    try:
        daemon.wait_ready(60)
        pod = api.add_pod("default", f"v-{uuid.uuid4().hex[:6]}", "node-a")
        uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
        wait_until(lambda: api.podports.get(("default", name)), 60)
        api.client().podports.patch(            # the CNI role bound the pod
            name, {"status": {"boundAt": "2026-11-26T00:00:00Z"}},
            namespace="default", subresource="status")
        spec = dict(api.podports[("default", name)]["spec"])
        [old] = real_cloud.ports(device_id=uid)
        real_cloud.admin("DELETE", f"/v2.0/ports/{old['id']}").expect(204)
        new = wait_until(lambda: real_cloud.ports(device_id=uid), 60)
        assert len(new) == 1 and new[0]["id"] != old["id"]
        assert new[0]["fixed_ips"][0]["ip_address"] == old["fixed_ips"][0]["ip_address"]
        assert new[0]["mac_address"] == old["mac_address"]
        assert new[0]["binding:host_id"] == "node-a"    # where the pod runs
        time.sleep(6)                             # one more resync
        # The PodPort names the port made again, nothing else changed.
        assert dict(api.podports[("default", name)]["spec"]) == dict(
            spec, portId=new[0]["id"])
        assert [p["id"] for p in real_cloud.ports(device_id=uid)] == [new[0]["id"]]
        assert daemon.status()["handlerFailures"] == 0
    finally:
        daemon.close()


def test_a_database_stall_during_a_create_doubles_nothing(
        tmp_path: Path, real_cloud: RealCloud, api: FakeAPI) -> None:
    """Neutron's database stops for 25 s while 10 ports are being created
    (the request times out after 15 s and commits after the stall): no pod
    ever has two ports, every PodPort names its pod's one port."""
    import os
    import signal
    assert real_cloud.db is not None
    db_pid = real_cloud.db.server.pid
    daemon = Daemon(tmp_path, controller_options(real_cloud, api.url))
    most = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.3):
            try:
                per = collections.Counter(p["device_id"] for p in ours(real_cloud))
            except Exception:  # noqa: BLE001 - the database is stopped
                continue
            most[0] = max([most[0], *per.values()])
    sampler = threading.Thread(target=sample, daemon=True)
    daemon.start()
    try:
        daemon.wait_ready(60)
        tag = uuid.uuid4().hex[:6]
        os.kill(db_pid, signal.SIGSTOP)
        try:
            pods = [api.add_pod("default", f"s{tag}-{i}", "node-a")
                    for i in range(10)]
            time.sleep(25)
        finally:
            os.kill(db_pid, signal.SIGCONT)
        sampler.start()
        uids = {p["metadata"]["uid"] for p in pods}

        def settled() -> bool:
            per = collections.Counter(p["device_id"] for p in ours(real_cloud))
            return all(per[u] == 1 for u in uids) and all(
                ("default", p["metadata"]["name"]) in api.podports for p in pods)
        wait_until(settled, 120)
        time.sleep(6)                             # one more resync
        stop.set()
        sampler.join()
        assert most[0] == 1
        ports = {p["id"]: p for p in ours(real_cloud) if p["device_id"] in uids}
        assert len(ports) == 10
        for pod in pods:
            spec = api.podports[("default", pod["metadata"]["name"])]["spec"]
            assert ports[spec["portId"]]["device_id"] == pod["metadata"]["uid"]
        assert "no answer within" in daemon.log() or "timed out" in daemon.log()
        assert daemon.status()["handlerFailures"] == 0
    finally:
        stop.set()
        with __import__("contextlib").suppress(ProcessLookupError):
            os.kill(db_pid, signal.SIGCONT)
        daemon.close()
