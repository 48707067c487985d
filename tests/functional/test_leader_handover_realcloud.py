"""Two controller replicas with ``leader_election`` against a real Keystone
and Neutron (MariaDB, several request threads) and one Kubernetes API fake
(the Lease lives there). Both replicas wait, ready and silent, while another
identity holds the Lease; one leads; it is killed with SIGKILL (every
process) in the middle of a burst of 100 pods. The standby leads within
``lease_duration`` + 2 s; every pod ends with exactly one port, named by its
PodPort; no pod ever had two ports; no port of ours is left over; no pod
waits on a guessed hold (the MACs are derived from the pods' UIDs: the
new leader's creates for the old leader's pods are refused by Neutron and
their ports adopted). Who
sent each request is read from its User-Agent in Neutron's access log (the
fixture's serve.py writes one) and in the Kubernetes API fake's: neither
standby writes to Neutron or to a PodPort while it waits, and after the
kill only the new leader writes.

The cloud is shared by the session: only ports tagged with this test's
own cluster are counted, and all of them are deleted at the end."""
from __future__ import annotations

import collections
import contextlib
import signal
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.kubernetes.lease import LeaderElector
from tests.fixtures.clouds import controller_options
from tests.fixtures.daemon import Daemon, wait_until
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.leader import (
    LEASE,
    holder,
    leads,
    signal_all,
    writers,
    writes_of,
)
from tests.fixtures.realcloud import RealCloud

pytestmark = pytest.mark.realcloud

DURATION = 5
PODPORTS = "/apis/kuryr-supervisor.openstack.org/v1/namespaces/"


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    yield fake
    fake.stop()


@pytest.fixture
def cluster(real_cloud: RealCloud) -> Iterator[str]:
    """This test's cluster id; every port tagged with it is deleted at the
    end, pass or fail."""
    name = f"ho-{uuid.uuid4().hex[:8]}"
    yield name
    for port in real_cloud.ports(tags=f"kuryr-supervisor:{name}"):
        real_cloud.admin("DELETE", f"/v2.0/ports/{port['id']}")


class Sampler:
    """Samples the cloud every 0.5 s: the most ports a pod of ours ever had
    at once, and every port id of ours ever seen."""

    def __init__(self, cloud: RealCloud, tag: str) -> None:
        self.cloud, self.tag = cloud, tag
        self.most = 0
        self.doubled: dict[str, int] = {}
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> list[dict[str, Any]]:
        ports = self.cloud.ports(tags=self.tag)
        per = collections.Counter(p["device_id"] for p in ports)
        self.doubled.update({d: n for d, n in per.items() if n > 1})
        self.most = max([self.most, *per.values()])
        self.seen.update(p["id"] for p in ports)
        return ports

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            with contextlib.suppress(Exception):
                self.sample()


@pytest.fixture
def replicas(tmp_path: Path, real_cloud: RealCloud, api: FakeAPI,
             cluster: str) -> Iterator[list[Daemon]]:
    """Two controller replicas with leader_election (not started)."""
    opts = controller_options(
        real_cloud, api.url,
        controller={"cluster_id": cluster, "leader_election": True,
                    "lease_duration": DURATION, "lease_namespace": LEASE[0]})
    daemons = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        daemons.append(Daemon(tmp_path / name, opts))
    yield daemons
    for d in daemons:
        d.close()


def whole_log(d: Daemon) -> str:
    return d.log_path.read_text(errors="replace")


def podport_writes(api: FakeAPI, since: float) -> int:
    return sum(1 for t, m, p, _ in list(api.requests)
               if t >= since and m in ("POST", "PUT", "PATCH", "DELETE")
               and p.startswith(PODPORTS))


def test_leader_killed_mid_burst_on_a_real_cloud(
        real_cloud: RealCloud, api: FakeAPI, cluster: str,
        replicas: list[Daemon]) -> None:
    tag = f"kuryr-supervisor:{cluster}"
    # Another identity holds the Lease: both replicas are standbys.
    other = LeaderElector(api.client(), namespace=LEASE[0], name=LEASE[1],
                          identity="elsewhere_1", duration=DURATION)
    assert other.try_acquire_or_renew()
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(0.5):
            other.try_acquire_or_renew()
    renewer = threading.Thread(target=renew, daemon=True)
    renewer.start()
    start_wall, start = time.time(), time.monotonic()
    try:
        for d in replicas:
            d.start()
        for d in replicas:
            d.wait_ready(60)
        with Sampler(real_cloud, tag) as sampler:
            # The burst arrives while both wait: neither writes anything.
            since = time.monotonic()
            created: dict[str, float] = {}
            pods = []
            for i in range(100):
                pods.append(api.add_pod("default", f"{cluster}-{i}",
                                        f"node-{i % 3}"))
                created[pods[-1]["metadata"]["name"]] = time.monotonic()
            uids = {p["metadata"]["uid"] for p in pods}
            time.sleep(DURATION + 1.0)
            assert all(d.probe("/ready") == 200 for d in replicas)
            assert holder(api) == "elsewhere_1"
            assert sampler.sample() == [], "a standby made a port"
            assert podport_writes(api, since) == 0, "a standby wrote a PodPort"
            # Release the Lease: one replica leads and starts the burst.
            stop.set()
            renewer.join()
            released_wall, released = time.time(), time.monotonic()
            wait_until(lambda: any(leads(api, d) for d in replicas),
                       DURATION + 10, 0.05)
            led = time.monotonic()
            first, second = sorted(replicas, key=lambda d: not leads(api, d))
            # Kill the leader once some PodPorts are written, not all.
            wait_until(lambda: len(api.podports) >= 5, 120, 0.05)
            # The standby's handlers never led while the leader wrote
            # (they start acting only once their replica leads).
            assert f"_{second.pid} leads (" not in whole_log(second)
            signal_all(first, signal.SIGKILL)
            killed_wall, killed = time.time(), time.monotonic()
            at_kill = len(api.podports)
            assert at_kill < 100, "the burst was over before the kill"
            wait_until(lambda: leads(api, second), DURATION + 10, 0.05)
            took = time.monotonic() - killed
            done: dict[str, float] = {}
            before_kill = {name for (_, name) in list(api.podports)}

            def all_ported() -> bool:
                for (_, name), _obj in list(api.podports.items()):
                    done.setdefault(name, time.monotonic())
                return len(done) >= 100
            wait_until(all_ported, 150, 0.05)
            settled = time.monotonic() - killed
            time.sleep(6)                       # a resync and its sweep
            ports = sampler.sample()
        # The burst's time: from the first leader's start (every pod
        # existed by then) to its PodPort, through the handover.
        latency = sorted(done[n] - max(created[n], led) for n in created)
        # The pods the old leader left: from the new leader's lead.
        took_over = killed + took
        waits = sorted(done[n] - took_over for n in created
                       if n not in before_kill)
        print(f"\nkill -> new leader {took:.2f} s; PodPorts at the kill "
              f"{at_kill}/100 ({killed - led:.1f} s after the first leader "
              f"started); burst p50 {statistics.median(latency):.1f} s p99 "
              f"{latency[98]:.1f} s; ports of ours {len(ports)}, ever seen "
              f"{len(sampler.seen)}, most per pod {sampler.most}, "
              f"duplicates {len(sampler.doubled)}; kill -> every PodPort "
              f"{settled:.1f} s; the left pods' wait after the new leader "
              f"led: max {waits[-1] if waits else 0.0:.1f} s, p50 "
              f"{statistics.median(waits) if waits else 0.0:.1f} s")
        assert took <= DURATION + 2, took
        assert sampler.most == 1, sampler.doubled   # never two at once
        by_pod = {p["device_id"]: p for p in ports}
        assert len(ports) == len(by_pod) == 100, len(ports)
        assert by_pod.keys() == uids                # 0 leaked, 0 missing
        for obj in api.podports.values():
            assert obj["spec"]["portId"] == by_pod[obj["spec"]["podUid"]]["id"]
        # No port was made and then deleted (a duplicate swept).
        assert sampler.seen == {p["id"] for p in ports}, \
            sampler.seen - {p["id"] for p in ports}
        assert f"_{second.pid} leads (" in whole_log(second)
        assert second.status()["handlerFailures"] == 0
        # Creates are idempotent (derived MACs): no hold after the handover.
        log = whole_log(second)
        assert "MAC addresses: derived" in log, log[-3000:]
        assert "may commit for" not in log, log[-3000:]
        ours = [first, second]           # "a" led first, "b" took over
        check_writers(ours, real_cloud.neutron_access(start_wall),
                      (released_wall, killed_wall), False)
        check_writers(ours, [r for r in api.access if r[0] >= start],
                      (released, killed), True)
    finally:
        stop.set()


def check_writers(replicas: list[Daemon], access: list[Any],
                  marks: tuple[float, float], podports: bool) -> None:
    """By User-Agent, in one server's access log (Neutron's, or the
    Kubernetes API's for PodPorts): both replicas (``a``: the first leader,
    ``b``: the standby) sent requests; before the Lease was released
    neither wrote; until the kill only ``a`` did; after it (past the
    requests already on the wire) only ``b``."""
    released, killed = marks
    assert {"a", "b"} <= set(writers(access, replicas)), \
        writers(access, replicas)
    mine = [r for r in writes_of(access, podports=podports)
            if writers([r], replicas).keys() <= {"a", "b"}]
    waiting = writers([r for r in mine if r[0] < released], replicas)
    leading = writers([r for r in mine if released <= r[0] < killed],
                      replicas)
    after = writers([r for r in mine if r[0] > killed + 0.5], replicas)
    assert waiting == {}, ("a standby wrote", waiting)
    assert set(leading) == {"a"}, ("the standby wrote", leading)
    assert set(after) == {"b"}, ("after the handover", after)


def test_paused_leader_writes_nothing_on_a_real_cloud(
        real_cloud: RealCloud, api: FakeAPI, cluster: str,
        replicas: list[Daemon]) -> None:
    """SIGSTOP to every process of the leader in the middle of a burst of
    60 pods, past its lease: the standby leads and ports every pod; on
    SIGCONT the old leader makes no Neutron write (no port made, deleted
    or updated) and changes no PodPort."""
    tag = f"kuryr-supervisor:{cluster}"
    first, second = replicas
    first.start()
    first.wait_ready(60)
    wait_until(lambda: leads(api, first), 15, 0.05)
    second.start()
    second.wait_ready(60)
    with Sampler(real_cloud, tag) as sampler:
        pods = [api.add_pod("default", f"{cluster}-{i}", f"node-{i % 3}")
                for i in range(60)]
        uids = {p["metadata"]["uid"] for p in pods}
        wait_until(lambda: len(api.podports) >= 5, 120, 0.05)
        signal_all(first, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            at_stop = len(api.podports)
            wait_until(lambda: leads(api, second), DURATION + 10, 0.05)
            took = time.monotonic() - stopped
            wait_until(lambda: len(api.podports) >= 60, 150, 0.1)
            time.sleep(6)                       # a resync and its sweep
            before = {p["id"]: (p["device_id"], p["revision_number"])
                      for p in sampler.sample()}
            specs = {k: (v["metadata"].get("resourceVersion"), dict(v["spec"]))
                     for k, v in api.podports.items()}
            since = time.monotonic()
        finally:
            signal_all(first, signal.SIGCONT)
        time.sleep(DURATION + 2.0)
        after = {p["id"]: (p["device_id"], p["revision_number"])
                 for p in sampler.sample()}
    print(f"\nSIGSTOP -> new leader {took:.2f} s; PodPorts at the stop "
          f"{at_stop}/60; ports of ours {len(after)}, ever seen "
          f"{len(sampler.seen)}, most per pod {sampler.most}")
    assert at_stop < 60, "the burst was over before the pause"
    assert took <= DURATION + 2, took
    assert after == before, first.log()[-3000:]     # no Neutron write
    assert {k: (v["metadata"].get("resourceVersion"), dict(v["spec"]))
            for k, v in api.podports.items()} == specs
    assert sampler.most == 1, sampler.doubled
    assert {d for d, _ in after.values()} == uids and len(after) == 60
    assert sampler.seen == set(after)               # nothing swept
    for obj in api.podports.values():
        assert after[obj["spec"]["portId"]][0] == obj["spec"]["podUid"]
    assert leads(api, second)
    # The old leader's handler exits on its fence or lease thread and
    # comes back as a live follower.
    wait_until(lambda: first.probe("/alive") == 200, 20)
    assert leads(api, second)
    print(f"PodPort writes after SIGCONT: {podport_writes(api, since)}")
