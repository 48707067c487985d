"""Two controller replicas with ``leader_election`` against one (fake)
cloud: a standby that is ready and silent, a leader killed with SIGKILL in
the middle of a burst, a leader paused past its lease. Every pod ends with
exactly one port, named by its PodPort; the standby leads within
``lease_duration`` + 2 s; nobody writes without the lease.

Who sent a request is read from its User-Agent, as the fakes logged it
(``kuryr-supervisor/<version> (controller; <host>; pid <master pid>)``):
the standby's requests are told apart from the leader's at Neutron and
at the Kubernetes API, not inferred from the Lease."""
from __future__ import annotations

import datetime
import json
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.kubernetes.lease import LeaderElector
from tests.fixtures.controller import Cloud, controller_daemon
from tests.fixtures.daemon import Daemon, wait_until
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.leader import LEASE, signal_all, writers, writes_of
from tests.fixtures.leader import holder as lease_holder
from tests.fixtures.leader import leads as leads_api
from tests.fixtures.openstack import FakeKeystone
from tests.fixtures.poolcloud import PooledNeutron

DURATION = 3
ELECTION = {"controller": {"leader_election": True,
                           "lease_duration": DURATION,
                           "lease_namespace": LEASE[0]}}
PODPORTS = "/apis/kuryr-supervisor.openstack.org/v1/namespaces/"


def fake_cloud(port_delay: float, cidr: str, gateway: str) -> Cloud:
    keystone = FakeKeystone().start()
    neutron = PooledNeutron(keystone, cidr=cidr, gateway=gateway,
                            port_delay=port_delay).start()
    return Cloud(FakeAPI().start(), keystone, neutron)


@pytest.fixture
def cloud() -> Iterator[Cloud]:
    # 10 ms a port: a bulk of 100 takes a second, so a burst is still
    # under way when the leader is killed.
    c = fake_cloud(0.01, "10.21.0.0/20", "10.21.0.1")
    yield c
    c.stop()


@pytest.fixture
def replicas(tmp_path: Path, cloud: Cloud) -> Iterator[list[Daemon]]:
    daemons = [controller_daemon(tmp_path / name, cloud, ELECTION)
               for name in ("a", "b")]
    yield daemons
    for d in daemons:
        d.close()


def holder(cloud: Cloud) -> str:
    return lease_holder(cloud.api)


def leads(cloud: Cloud, d: Daemon) -> bool:
    return leads_api(cloud.api, d)


def burst(cloud: Cloud, count: int, prefix: str) -> list[str]:
    uids = []
    for i in range(count):
        uid = str(uuid.uuid4())
        uids.append(uid)
        cloud.api.load_pods([{
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {"namespace": "ns", "name": f"{prefix}{i}", "uid": uid},
            "spec": {"nodeName": f"node-{i % 5}", "containers": [{"name": "c"}]},
            "status": {"phase": "Pending"}}])
    return uids


def writes(cloud: Cloud, since_wall: float, since_mono: float) -> dict[str, int]:
    """Neutron writes (by method and path) and PodPort writes since then."""
    out = {k: n for k, n in cloud.neutron.counts(since_wall).items()
           if k.split()[0] in ("POST", "PUT", "DELETE")}
    out["podport writes"] = sum(
        1 for t, m, p, _ in list(cloud.api.requests)
        if t >= since_mono and m in ("POST", "PUT", "DELETE")
        and p.startswith(PODPORTS))
    return {k: n for k, n in out.items() if n}


def ported(cloud: Cloud) -> int:
    return len(cloud.api.podports)


def snapshot(cloud: Cloud) -> tuple[dict[str, Any], dict[str, str]]:
    """What the controllers wrote: PodPorts (version and spec) and ports
    (id -> device)."""
    podports = {f"{ns}/{name}": (o["metadata"].get("resourceVersion"),
                                 dict(o["spec"]))
                for (ns, name), o in list(cloud.api.podports.items())}
    ports = {i: p["device_id"] for i, p in list(cloud.neutron.ports.items())}
    return podports, ports


def check_one_port_each(cloud: Cloud, uids: list[str]) -> None:
    """Every pod: exactly one port, and its PodPort names it; no port of
    the controller's belongs to no pod."""
    by_pod = {uid: cloud.neutron.ports_for(uid) for uid in uids}
    doubled = {u: len(p) for u, p in by_pod.items() if len(p) > 1}
    missing = [u for u, p in by_pod.items() if not p]
    assert not doubled and not missing, (doubled, missing)
    for obj in cloud.api.podports.values():
        uid = obj["spec"]["podUid"]
        assert obj["spec"]["portId"] == by_pod[uid][0]["id"]
    leaked = [p["id"] for p in cloud.neutron.ports.values()
              if p["device_id"] not in by_pod]
    assert not leaked, leaked


def test_standby_is_ready_and_silent_then_leads(
        replicas: list[Daemon], cloud: Cloud) -> None:
    """While another replica holds the lease, both are ready and neither
    writes to Neutron or PodPorts; once that holder stops renewing, one
    leads within lease_duration + 2 s and ports the pods."""
    other = LeaderElector(cloud.api.client(), namespace=LEASE[0],
                          name=LEASE[1], identity="elsewhere_1",
                          duration=DURATION)
    assert other.try_acquire_or_renew()
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(0.5):
            other.try_acquire_or_renew()
    thread = threading.Thread(target=renew, daemon=True)
    thread.start()
    try:
        for d in replicas:
            d.start()
        for d in replicas:
            d.wait_ready(30)
        wall, mono = time.time(), time.monotonic()
        uids = burst(cloud, 20, "w")
        time.sleep(DURATION + 1.0)
        assert all(d.probe("/ready") == 200 for d in replicas)
        assert writes(cloud, wall, mono) == {}
        assert holder(cloud) == "elsewhere_1"
    finally:
        stop.set()
        thread.join()
    released = time.monotonic()
    wait_until(lambda: any(leads(cloud, d) for d in replicas), DURATION + 5)
    took = time.monotonic() - released
    assert took <= DURATION + 2, took
    wait_until(lambda: ported(cloud) == 20, 30)
    time.sleep(2.5)                              # a resync
    check_one_port_each(cloud, uids)


def test_leader_killed_mid_burst_loses_nothing(
        replicas: list[Daemon], cloud: Cloud) -> None:
    """SIGKILL to every process of the leader while 500 pods arrive: the
    standby leads within lease_duration + 2 s, every pod gets exactly one
    port, none is leaked and none was ever doubled (nothing to sweep)."""
    first, second = replicas
    start_wall, start = time.time(), time.monotonic()
    first.start()
    first.wait_ready(30)
    wait_until(lambda: leads(cloud, first), 15)
    second.start()
    second.wait_ready(30)
    assert leads(cloud, first)
    uids = burst(cloud, 500, "k")
    wait_until(lambda: ported(cloud) >= 100, 60)
    signal_all(first, signal.SIGKILL)
    killed_wall, killed = time.time(), time.monotonic()
    assert ported(cloud) < 500, "the burst was over before the kill"
    wait_until(lambda: leads(cloud, second), DURATION + 10)
    took = time.monotonic() - killed
    assert took <= DURATION + 2, took
    wait_until(lambda: ported(cloud) == 500, 120)
    time.sleep(5)                               # resyncs and their sweeps
    check_one_port_each(cloud, uids)
    deleted = cloud.neutron.counts()["DELETE /v2.0/ports/{id}"]
    assert deleted == 0, f"{deleted} duplicate ports were made and swept"
    check_writers(replicas, [r for r in cloud.neutron.access
                             if r[0] >= start_wall], killed_wall,
                  [r for r in cloud.api.access if r[0] >= start], killed)


def check_writers(replicas: list[Daemon], neutron: list[Any],
                  killed_wall: float, k8s: list[Any], killed: float) -> None:
    """By User-Agent: every request at Neutron and at the Kubernetes API
    came from one of the replicas (``a``, the first leader, or ``b``);
    until the kill only ``a`` wrote to Neutron or to a PodPort, after it
    (past the requests already on the wire) only ``b``."""
    assert set(writers(neutron, replicas)) == {"a", "b"}, \
        writers(neutron, replicas)
    assert set(writers(k8s, replicas)) == {"a", "b"}, writers(k8s, replicas)
    for log, at, podports in ((neutron, killed_wall, False),
                              (k8s, killed, True)):
        before = writes_of([r for r in log if r[0] < at], podports=podports)
        after = writes_of([r for r in log if r[0] > at + 0.5],
                          podports=podports)
        assert set(writers(before, replicas)) == {"a"}, \
            ("the standby wrote", writers(before, replicas))
        assert set(writers(after, replicas)) == {"b"}, \
            ("after the handover", writers(after, replicas))


def test_paused_leader_does_not_write_after_losing_the_lease(
        replicas: list[Daemon], cloud: Cloud) -> None:
    """SIGSTOP to the leader in the middle of a burst, past its lease: the
    standby takes over and ports every pod; on SIGCONT the old leader
    writes nothing (its handler exits and comes back as a follower)."""
    first, second = replicas
    first.start()
    first.wait_ready(30)
    wait_until(lambda: leads(cloud, first), 15)
    second.start()
    second.wait_ready(30)
    uids = burst(cloud, 200, "s")
    wait_until(lambda: ported(cloud) >= 30, 60)
    signal_all(first, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        wait_until(lambda: leads(cloud, second), DURATION + 10)
        assert time.monotonic() - stopped <= DURATION + 2
        wait_until(lambda: ported(cloud) == 200, 120)
        time.sleep(3)                           # the new leader settles
        before = snapshot(cloud)
        wall, mono = time.time(), time.monotonic()
    finally:
        signal_all(first, signal.SIGCONT)
    time.sleep(DURATION + 1.0)
    late = writes(cloud, wall, mono)
    # Neither replica changed anything: no Neutron write at all, and no
    # PodPort changed (a write a paused thread had already cleared with
    # its fence before the pause may still arrive; it can only be
    # refused: the PodPort exists, and a replace needs its version).
    assert not {k: n for k, n in late.items() if k != "podport writes"}, \
        (late, first.log())
    assert snapshot(cloud) == before, (late, first.log())
    assert leads(cloud, second)
    check_one_port_each(cloud, uids)
    # The old leader's handler exits (its fence or lease thread) or is
    # killed as stale by its master; it comes back as a live follower.
    wait_until(lambda: first.probe("/alive") == 200, 20)
    assert leads(cloud, second)


@pytest.fixture
def slow_cloud() -> Iterator[Cloud]:
    """Half a second a port: a bulk of 10 commits 5 s after it is sent,
    past the 3 s lease of a leader killed just after sending it."""
    c = fake_cloud(0.5, "10.22.0.0/24", "10.22.0.1")
    yield c
    c.stop()


def creates_until(cloud: Cloud) -> float:
    """Until when (wall clock) the creates Lease says creates may commit."""
    lease = cloud.api.leases.get((LEASE[0], LEASE[1] + "-creates"))
    assert lease is not None, "no creates Lease"
    spec = lease["spec"]
    renewed = datetime.datetime.fromisoformat(
        spec["renewTime"].replace("Z", "+00:00")).timestamp()
    return renewed + int(spec["leaseDurationSeconds"])


@pytest.mark.parametrize("macs", [True, False], ids=["derived", "neutrons"])
def test_creates_in_flight_at_a_handover_are_waited_out(
        tmp_path: Path, slow_cloud: Cloud, macs: bool) -> None:
    """The leader is killed right after sending a bulk create that Neutron
    commits only after the standby leads: the new leader makes no second
    port for those pods, while pods created after it leads get their
    ports at once. With MACs derived from the pods' UIDs it holds nothing
    and announces nothing: its own create for those pods is refused by
    Neutron (409) and the old leader's ports adopted. Where Neutron's
    policy refuses the MACs, it holds the pods the old leader announced in
    its creates Lease, adopting their ports as they land."""
    cloud = slow_cloud
    cloud.neutron.refuse_macs = not macs
    first, second = (controller_daemon(tmp_path / n, cloud, ELECTION)
                     for n in ("a", "b"))
    try:
        first.start()
        first.wait_ready(30)
        wait_until(lambda: leads(cloud, first), 15)
        second.start()
        second.wait_ready(30)
        start_wall = time.time()
        uids = burst(cloud, 10, "f")
        # (the first create refused for its MACs where the policy says so)
        wait_until(lambda: len(writes_of([r for r in cloud.neutron.access
                                          if r[0] >= start_wall]))
                   >= (1 if macs else 2), 15, 0.01)
        signal_all(first, signal.SIGKILL)
        killed_wall = time.time()
        if macs:
            assert (LEASE[0], LEASE[1] + "-creates") not in cloud.api.leases
            announced = killed_wall + DURATION + 60
        else:
            announced = creates_until(cloud)
            assert announced > killed_wall + 2 * DURATION, \
                announced - killed_wall
            # The Lease names the pods of the request at Neutron, and only
            # them.
            lease = cloud.api.leases[(LEASE[0], LEASE[1] + "-creates")]
            in_flight = json.loads(lease["metadata"]["annotations"][
                "kuryr-supervisor.openstack.org/creates-in-flight"])
            assert in_flight and set(in_flight) <= set(uids), in_flight
        wait_until(lambda: "pod watch synced" in second.log(), DURATION + 10)
        late = burst(cloud, 5, "l")     # after its first list
        wait_until(lambda: all(cloud.neutron.ports_for(u) for u in late), 60)
        # The late pods did not wait for the old leader's creates.
        assert time.time() < announced, "the late pods waited"
        wait_until(lambda: ported(cloud) == 15, 60)
        time.sleep(3)                             # a resync and its sweep
        check_one_port_each(cloud, uids + late)
        counts = cloud.neutron.counts()
        assert counts["DELETE /v2.0/ports/{id}"] == 0, counts
        # The first ten came from the killed leader's one request.
        posts = writers(writes_of([r for r in cloud.neutron.access
                                   if r[0] >= start_wall]),
                        [first, second])
        assert posts.get("a") == (1 if macs else 2), posts
        held = "may commit for" in second.log()
        assert held is not macs, second.log()[-2000:]
    finally:
        for d in (first, second):
            d.close()
