"""The controller role: a real daemon (``role = controller``) against the
Kubernetes API, Keystone and Neutron fakes over real HTTP on loopback."""
from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.controller import Cloud, cloud_fixture, controller_daemon
from tests.fixtures.daemon import Daemon, wait_until

cloud = pytest.fixture(cloud_fixture)


@pytest.fixture
def controller(tmp_path: Path, cloud: Cloud) -> Iterator[Daemon]:
    d = controller_daemon(tmp_path, cloud)
    d.start()
    yield d
    d.close()


def ready_body(d: Daemon) -> tuple[int, str]:
    return d.get("/ready?verbose")


def test_role_runs_handler_and_health(controller: Daemon) -> None:
    controller.wait_ready()
    status = controller.status()
    assert sorted(status["components"]) == ["handler:neutron_port", "health"]
    code, body = ready_body(controller)
    assert code == 200
    for check in ("k8s-watch", "keystone", "neutron", "handler-synced"):
        assert f"[+]{check} ok" in body, body
    assert "watcher" not in controller.get("/alive?verbose")[1]


def test_pod_gets_port_then_loses_it(controller: Daemon, cloud: Cloud) -> None:
    controller.wait_ready()
    pod = cloud.api.add_pod("default", "web", "node-a")
    uid = pod["metadata"]["uid"]
    note = wait_until(lambda: cloud.podport("default", "web"), 10)
    [port] = cloud.neutron.ports_for(uid)
    assert note["portId"] == port["id"] and note["podUid"] == uid
    assert note["mac"] == port["mac_address"]
    assert note["address"] == port["fixed_ips"][0]["ip_address"] + "/24"
    assert note["gateway"] == "10.20.0.1"
    # host-network pods get no port
    cloud.api.add_pod("default", "hn", "node-a", hostNetwork=True)
    cloud.api.delete_pod("default", "web")
    wait_until(lambda: not cloud.neutron.ports_for(uid), 10)
    time.sleep(0.5)
    assert cloud.neutron.ports == {}
    assert controller.status()["handlerFailures"] == 0


def test_pods_existing_at_start_and_leaked_ports(tmp_path: Path, cloud: Cloud) -> None:
    """Pods that exist before the controller starts get ports; ports whose
    pod is gone (deleted while no controller ran) are swept."""
    existing = cloud.api.add_pod("ns1", "early", "node-a")
    leaked = cloud.api.add_pod("ns1", "gone", "node-a")
    d = controller_daemon(tmp_path, cloud)
    d.start()
    try:
        wait_until(lambda: cloud.podport("ns1", "gone"), 20)
        d.close()
        cloud.api.delete_pod("ns1", "gone")          # while the controller is down
        assert len(cloud.neutron.ports_for(leaked["metadata"]["uid"])) == 1
        d.start()
        wait_until(lambda: not cloud.neutron.ports_for(leaked["metadata"]["uid"]), 20)
        assert len(cloud.neutron.ports_for(existing["metadata"]["uid"])) == 1
    finally:
        d.close()


def test_handler_killed_mid_creation(controller: Daemon, cloud: Cloud) -> None:
    """SIGKILL between Neutron creating the port and the handler hearing of
    it: the restarted handler adopts that port; none leaks or doubles."""
    controller.wait_ready()
    cloud.neutron.create_delay = 3.0
    pod = cloud.api.add_pod("default", "slow", "node-a")
    uid = pod["metadata"]["uid"]
    wait_until(lambda: cloud.neutron.ports_for(uid), 10)
    handler = controller.worker_pids()["handler:neutron_port"]
    os.kill(handler, signal.SIGKILL)     # the handler only, not the master
    cloud.neutron.create_delay = 0.0
    note = wait_until(lambda: cloud.podport("default", "slow"), 15)
    assert controller.worker_pids()["handler:neutron_port"] != handler
    ports = cloud.neutron.ports_for(uid)
    assert [p["id"] for p in ports] == [note["portId"]]
    time.sleep(1.0)
    assert len(cloud.neutron.ports) == 1


def test_keystone_down_not_ready_but_alive(tmp_path: Path, cloud: Cloud) -> None:
    """A Keystone outage shows when the token is due for renewal (within
    token_renew_margin of its expiry): not ready, still alive."""
    cloud.keystone.token_lifetime = 3.0
    controller = controller_daemon(tmp_path, cloud,
                                   {"controller": {"token_renew_margin": 1.5}})
    controller.start()
    try:
        controller.wait_ready()
        cloud.keystone.down()
        code, body = wait_until(lambda: (lambda r: r if r[0] != 200 else None)(
            ready_body(controller)), 10)
        assert "[-]keystone failed" in body and "Keystone" in body, body
        for _ in range(10):
            assert controller.probe("/alive") == 200
            time.sleep(0.2)
        check = controller.status()["checks"]["keystone"]
        assert check["state"] == "failed" and check["since"]
        cloud.keystone.up()
        controller.wait_ready(15)
    finally:
        controller.close()


def test_quota_exhausted_not_ready_named(controller: Daemon, cloud: Cloud) -> None:
    controller.wait_ready()
    cloud.api.add_pod("default", "a", "node-a")
    wait_until(lambda: cloud.podport("default", "a"), 10)
    cloud.neutron.port_limit = 1
    before = time.time()
    code, body = wait_until(lambda: (lambda r: r if r[0] != 200 else None)(
        ready_body(controller)), 10)
    assert "[-]neutron failed" in body and "port quota exhausted" in body, body
    status = controller.status()
    check = status["checks"]["neutron"]
    assert "1 of 1 ports used" in check["message"]
    from datetime import datetime
    since = datetime.fromisoformat(check["since"].replace("Z", "+00:00"))
    assert since.timestamp() >= before - 1
    # a pod that cannot get a port waits; it is not the handler's failure
    cloud.api.add_pod("default", "b", "node-a")
    time.sleep(1.5)
    assert cloud.podport("default", "b") is None
    assert controller.probe("/alive") == 200
    assert controller.status()["handlerFailures"] == 0
    cloud.neutron.port_limit = 10
    wait_until(lambda: cloud.podport("default", "b"), 40)
    controller.wait_ready(10)


def test_token_renewed_without_a_request_per_probe(tmp_path: Path, cloud: Cloud) -> None:
    cloud.keystone.token_lifetime = 3.0
    d = controller_daemon(tmp_path, cloud,
                          {"controller": {"token_renew_margin": 1.5}})
    d.start()
    try:
        d.wait_ready()
        issued = cloud.keystone.issued()
        probes = 0
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:   # more than one token lifetime
            assert d.probe("/ready") == 200, d.get("/ready?verbose")[1]
            probes += 1
            time.sleep(0.02)
        renewed = cloud.keystone.issued() - issued
        # two processes (handler, health), each renews every ~1.5 s
        assert 1 <= renewed <= 8 and probes > 50
        assert cloud.neutron.rejected_tokens == 0
    finally:
        d.close()


def test_handler_stale_is_named_and_restarted(controller: Daemon) -> None:
    controller.wait_ready()
    handler = controller.worker_pids()["handler:neutron_port"]
    os.kill(handler, signal.SIGSTOP)     # the supervisor itself kills it
    code, body = wait_until(lambda: (lambda r: r if r[0] != 200 else None)(
        controller.get("/alive?verbose")), 10)
    assert "[-]handler:neutron_port failed" in body, body
    assert "stale" in body or "heartbeat deadline" in body, body
    wait_until(lambda: controller.worker_pids()["handler:neutron_port"] != handler, 10)
    controller.wait_ready(15)
    assert json.loads(controller.get("/status")[1])["components"]["handler:neutron_port"]["restarts"] >= 1


def test_two_replicas_one_leader(tmp_path: Path, cloud: Cloud) -> None:
    """With leader_election, only the Lease holder's handlers act; when the
    leader dies the other replica takes over once the lease runs out."""
    election = {"controller": {"leader_election": True, "lease_duration": 2,
                               "lease_namespace": "kube-system"}}
    first = controller_daemon(tmp_path / "a", cloud, election)
    second = controller_daemon(tmp_path / "b", cloud, election)
    try:
        first.start()
        first.wait_ready()
        second.start()
        # the standby is alive and ready (rolling updates proceed); its
        # handlers wait for the lease
        second.wait_ready()
        assert second.probe("/alive") == 200
        holder = cloud.api.leases[("kube-system", "kuryr-supervisor-controller")]
        # the replica is the candidate: its master's pid, not a handler's
        assert holder["spec"]["holderIdentity"].endswith(f"_{first.pid}")
        cloud.api.add_pod("default", "one", "node-a")
        wait_until(lambda: cloud.podport("default", "one"), 10)
        assert len(cloud.neutron.ports) == 1
        first.close()                       # the leader dies
        pod = cloud.api.add_pod("default", "two", "node-a")
        wait_until(lambda: cloud.podport("default", "two"), 15)
        assert len(cloud.neutron.ports_for(pod["metadata"]["uid"])) == 1
        assert len(cloud.neutron.ports) == 2
    finally:
        first.close()
        second.close()


def test_handler_failure_budget_exits_76(tmp_path: Path, cloud: Cloud) -> None:
    """Failures that are the handler's own (here: a subnet without gateway,
    so no annotation can be written) count; past handler_failures_count
    liveness fails, and under the exit policy the master exits 76."""
    d = controller_daemon(tmp_path, cloud, {
        "controller": {"handler_failures_count": 2},
        "supervisor": {"worker_death_policy": "exit"}})
    d.start()
    try:
        d.wait_ready()
        cloud.neutron.subnet["gateway_ip"] = None
        cloud.api.add_pod("default", "broken", "node-a")
        assert d.wait_exit(20) == 76, d.log()
        assert "handler-failures" in d.log() or "handler failures" in d.log()
    finally:
        d.close()


def test_sigterm_drains_and_exits_0(controller: Daemon) -> None:
    controller.wait_ready()
    controller.signal(signal.SIGTERM)
    assert controller.wait_exit(15) == 0, controller.log()
