"""The controller role: a real daemon (``role = controller``) against the
Kubernetes API, Keystone and Neutron fakes over real HTTP on loopback.

Fake only, each for a reason given in its docstring: a fault injected
(a create delayed past a kill, a subnet without gateway), a Keystone
whose tokens live 3 s (the session's real Keystone issues hour-long ones)
and counts the tokens it issued, or a claim about the supervisor that no
cloud changes (a stale handler, SIGTERM, the Lease between replicas: the
real-cloud handover is test_leader_handover_realcloud.py). What the
controller does to Neutron and the PodPorts runs against both clouds in
test_controller_clouds.py.
"""
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
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.openstack import FakeKeystone
from tests.fixtures.poolcloud import PooledNeutron

cloud = pytest.fixture(cloud_fixture)


@pytest.fixture
def controller(tmp_path: Path, cloud: Cloud) -> Iterator[Daemon]:
    d = controller_daemon(tmp_path, cloud)
    d.start()
    yield d
    d.close()


def ready_body(d: Daemon) -> tuple[int, str]:
    return d.get("/ready?verbose")


def test_handler_killed_mid_creation(controller: Daemon, cloud: Cloud) -> None:
    """SIGKILL between Neutron creating the port and the handler hearing of
    it: the restarted handler adopts that port; none leaks or doubles.
    Fake only: the create is held 3 s on demand (``create_delay``)."""
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


@pytest.mark.parametrize("macs", [True, False], ids=["derived", "neutrons"])
def test_handler_killed_with_a_create_at_neutron_doubles_nothing(
        tmp_path: Path, macs: bool) -> None:
    """SIGKILL to the handler alone just after it sent a bulk create that
    Neutron commits 5 s later: the handler the master starts in its place
    makes no second port for those pods and adopts theirs; pods created
    after it started get their ports at once; no port is ever deleted as a
    duplicate. With MACs derived from the pods' UIDs its own create for
    those pods is refused by Neutron (409) and the first's ports adopted,
    with no hold; where Neutron's policy refuses the MACs, it holds those
    pods (no leader election: the announcement is in the master's shared
    memory). Fake only: Neutron takes 0.5 s a port."""
    keystone = FakeKeystone().start()
    cloud = Cloud(FakeAPI().start(), keystone,
                  PooledNeutron(keystone, port_delay=0.5).start())
    cloud.neutron.refuse_macs = not macs
    d = controller_daemon(tmp_path, cloud)
    try:
        d.start()
        d.wait_ready()
        start = time.time()
        first = [cloud.api.add_pod("default", f"f{i}", "node-a")["metadata"]
                 ["uid"] for i in range(10)]
        # (the first create refused for its MACs where the policy says so)
        wait_until(lambda: cloud.neutron.counts(start)["POST /v2.0/ports"]
                   >= (1 if macs else 2), 15, 0.01)
        handler = d.worker_pids()["handler:neutron_port"]
        os.kill(handler, signal.SIGKILL)         # the handler only
        killed = time.monotonic()
        wait_until(lambda: d.worker_pids()["handler:neutron_port"] != handler
                   and d.log().count("pod watch synced") >= 2, 20)
        late = [cloud.api.add_pod("default", f"l{i}", "node-a")["metadata"]
                ["uid"] for i in range(3)]
        wait_until(lambda: all(cloud.neutron.ports_for(u) for u in late), 20)
        # The late pods did not wait for the killed handler's creates
        # (3 times the request's 6 s timeout).
        assert time.monotonic() - killed < 18.0
        wait_until(lambda: len(cloud.api.podports) == 13, 60)
        time.sleep(2.5)                          # a resync and its sweep
        for uid in first + late:
            assert len(cloud.neutron.ports_for(uid)) == 1, uid
        counts = cloud.neutron.counts(start)
        assert counts["DELETE /v2.0/ports/{id}"] == 0, counts
        log = d.log()
        if macs:
            assert "may commit for" not in log, log[-3000:]   # no hold
            assert "already made" in log, log[-3000:]         # adopted
        else:
            assert "may commit for" in log, log[-3000:]
    finally:
        d.close()
        cloud.stop()


def test_keystone_down_not_ready_but_alive(tmp_path: Path, cloud: Cloud) -> None:
    """A Keystone outage shows when the token is due for renewal (within
    token_renew_margin of its expiry): not ready, still alive. Fake only:
    3 s tokens; the real Keystone stopped is
    test_cloud_adapter.py::test_controller_through_an_outage[keystone]."""
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


def test_token_renewed_without_a_request_per_probe(tmp_path: Path, cloud: Cloud) -> None:
    """Fake only: 3 s tokens, and the tokens Keystone issued and Neutron
    refused are counted by the fakes."""
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
    """Fake only: the supervisor's claim; no cloud changes it."""
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
    leader dies the other replica takes over once the lease runs out.
    Fake only: the Lease's claim; against the real cloud, with every
    request attributed to its replica: test_leader_handover_realcloud.py."""
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
    liveness fails, and under the exit policy the master exits 76.
    Fake only: the subnet loses its gateway on demand."""
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
    """Fake only: the supervisor's claim; no cloud changes it."""
    controller.wait_ready()
    controller.signal(signal.SIGTERM)
    assert controller.wait_exit(15) == 0, controller.log()
