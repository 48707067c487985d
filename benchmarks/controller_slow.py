"""Benchmark 10 — the controller against a slow, concurrent Neutron.

A real controller daemon (``role = controller``, production defaults:
``openstack_timeout`` 5 s) against the Kubernetes API and Keystone fakes
and the Neutron fake made to behave as a deployed Neutron does (its fault
knobs): every port of a create costs 0.1-0.4 s of work, four creates are
worked on at once (a Neutron with four API workers), and a create is
committed when its work ends whether or not the client still waits. A bulk
of 100 ports then takes about 25 s, five times the timeout.

A burst of pods is created at once (100; 500 without ``--quick``), and:

- Neutron's store is sampled every 20 ms while it runs: the most ports one
  pod ever had and the most pods with two or more at once (goal 0 pods);
- at the end: ports created in all (POSTed ports), ports per pod, PodPorts
  rewritten after they were first written (goal 0);
- pod created -> PodPort written, p50 and p99, beside the floor Neutron
  itself sets (ports x mean latency / workers: no client can be faster);
- a restart of the daemon: Neutron writes from exec until 5 s after it is
  ready (goal 0).

Compare revisions with ``python3 -m benchmarks --only controller-slow
--rev <commit>`` in the same session: the fakes are this checkout's.
With ``KURYR_BENCH_CLOUD=real`` the same burst runs against a real
Keystone and Neutron (``tests/fixtures/realcloud``: Neutron on MariaDB, 4
request threads, the test ML2 driver binding at once); its store is then
sampled every 0.5 s through Neutron's own API (as admin), and "writes on
restart" are the ports created or deleted meanwhile.
"""
from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from benchmarks.context import Context, Outcome
from benchmarks.harness import Workspace, wait_until
from benchmarks.stats import Figure, summarize

NAME = "controller-slow"
LATENCY = (0.1, 0.4)            # seconds of Neutron work per port
WORKERS = 4                     # creates Neutron works on at once
WRITES = ("POST", "PUT", "DELETE")


class Sampler(threading.Thread):
    """The cloud's ports every ``every`` seconds: the worst duplicates
    seen, and every port id seen."""

    def __init__(self, ports: Callable[[], list[tuple[str, str]]],
                 every: float) -> None:
        super().__init__(daemon=True)
        self.ports, self.every, self.stop = ports, every, threading.Event()
        self.most_ports = self.most_pods = 0
        self.seen: set[str] = set()

    def run(self) -> None:
        while not self.stop.wait(self.every):
            try:
                ports = self.ports()
            except Exception:  # noqa: BLE001 - a missed sample
                continue
            per = collections.Counter(device for device, _ in ports)
            self.seen.update(port for _, port in ports)
            self.most_ports = max([self.most_ports, *per.values()])
            self.most_pods = max(self.most_pods,
                                 sum(1 for n in per.values() if n > 1))


class FakeSide:
    """The fakes, Neutron made slow (see the module)."""

    kind = "fake"

    def __init__(self) -> None:
        from tests.fixtures.controller import start_cloud
        self.cloud = start_cloud(cidr="10.32.0.0/16", gateway="10.32.0.1")
        self.api, self.neutron = self.cloud.api, self.cloud.neutron
        self.neutron.faults.port_latency = LATENCY
        self.neutron.faults.workers = WORKERS
        self.network_id = self.neutron.network_id
        self.subnet_id = self.neutron.subnet["id"]
        self.every = 0.02

    def conf_overrides(self) -> dict[str, str]:
        return self.cloud.keystone.conf_overrides()

    def ports(self) -> list[tuple[str, str]]:
        with self.neutron.lock:
            return [(p["device_id"], p["id"]) for p in self.neutron.ports.values()]

    def ports_of(self, uid: str) -> int:
        return len(self.neutron.ports_for(uid))

    def close(self) -> None:
        self.cloud.stop()


class RealSide:
    """A real Keystone and Neutron (tests/fixtures/realcloud)."""

    kind = "real"

    def __init__(self) -> None:
        from tests.fixtures.fakeapi import FakeAPI
        from tests.fixtures.realcloud import RealCloud
        self.cloud = RealCloud().start()
        # Neutron's default quota (500 ports) is exactly a full burst: a
        # controller with its quota used up is not ready, and the restart
        # measured after the burst would wait on it.
        self.cloud.set_port_quota(2000)
        self.api = FakeAPI().start()
        self.network_id, self.subnet_id = self.cloud.network_id, self.cloud.subnet_id
        self.every = 0.5

    def conf_overrides(self) -> dict[str, str]:
        return self.cloud.conf_overrides()

    def ports(self) -> list[tuple[str, str]]:
        return [(p["device_id"], p["id"]) for p in self.cloud.ports(
            network_id=self.network_id, device_owner="compute:kuryr",
            fields=["id", "device_id"])]

    def ports_of(self, uid: str) -> int:
        return self.cloud.count_ports(device_id=uid)

    def close(self) -> None:
        self.api.stop()
        self.cloud.close()


def scenario(ws: Workspace, count: int, *, kind: str = "fake",
             timeout: float = 300.0) -> dict[str, Any]:
    side: FakeSide | RealSide = RealSide() if kind == "real" else FakeSide()
    api = side.api
    daemon = ws.daemon({
        "DEFAULT": {"role": "controller"},
        "kubernetes": {"api_root": api.url, "node_name": "bench-node"},
        "controller": {"pod_network_id": side.network_id,
                       "pod_subnet_id": side.subnet_id},
        "neutron": side.conf_overrides()}, start=False)
    out: dict[str, Any] = {"pods": count, "cloud": kind}
    sampler = Sampler(side.ports, side.every)
    try:
        daemon.start()
        daemon.wait_ready(120)
        sampler.start()
        created: dict[tuple[str, str], float] = {}
        for i in range(count):
            api.add_pod(f"ns{i % 5}", f"p{i}", f"node-{i % 10}")
            created[(f"ns{i % 5}", f"p{i}")] = time.monotonic()
        t0 = time.monotonic()
        uids = [p["metadata"]["uid"] for p in api.pods.values()]

        def settled() -> bool:
            if len(api.podports) != count:
                return False
            per = collections.Counter(d for d, _ in side.ports())
            return all(per[uid] == 1 for uid in uids)
        try:
            wait_until(settled, timeout, 0.5)
            out["settled_s"] = time.monotonic() - t0
        except Exception:  # noqa: BLE001 - reported as not settled
            out["settled_s"] = None
        sampler.stop.set()
        sampler.join()
        out["most_ports_one_pod"] = sampler.most_ports
        out["most_pods_with_two"] = sampler.most_pods
        if isinstance(side, FakeSide):
            neutron = side.neutron
            out["ports_posted"] = sum(neutron.bulk_sizes) + sum(
                1 for _, m, p in neutron.requests if m == "POST"
                and p == "/v2.0/ports") - len(neutron.bulk_sizes)
            out["late_commits"] = neutron.faults.late_commits
        else:
            out["ports_posted"] = len(sampler.seen)      # seen, at least
            out["late_commits"] = None
        per = collections.Counter(d for d, _ in side.ports())
        out["ports_now"] = sum(per.values())
        out["pods_with_one_port"] = sum(1 for uid in uids if per[uid] == 1)
        out["podport_rewrites"] = sum(
            1 for _, kind_, obj in api.events if kind_ == "MODIFIED"
            and obj.get("kind") == "PodPort" and "spec" in obj
            and _spec_changed(api, obj))
        out["pod_to_podport_s"] = [api.podport_times[k] - t for k, t in
                                   created.items() if k in api.podport_times]
        # a restart: no write to Neutron
        before = set(p for _, p in side.ports())
        daemon.close()
        wall = time.time()
        daemon.start()
        daemon.wait_ready(120)
        time.sleep(5 if kind == "fake" else 10)
        after = set(p for _, p in side.ports())
        writes = {"created": len(after - before), "deleted": len(before - after)}
        if isinstance(side, FakeSide):
            writes = {k: n for k, n in side.neutron.counts(wall).items()
                      if k.split()[0] in WRITES}
        out["restart_neutron_writes"] = writes
    finally:
        sampler.stop.set()
        daemon.close()
        side.close()
    return out


def _spec_changed(api: Any, obj: dict[str, Any]) -> bool:
    """A MODIFIED PodPort whose spec differs from the first one written."""
    meta = obj["metadata"]
    key = (meta["namespace"], meta["name"])
    for _, kind, first in api.events:
        if kind == "ADDED" and first.get("kind") == "PodPort" and \
                (first["metadata"]["namespace"], first["metadata"]["name"]) == key:
            return bool(first["spec"] != obj["spec"])
    return False


def run(ctx: Context) -> Outcome:
    kind = os.environ.get("KURYR_BENCH_CLOUD", "fake")
    count = ctx.scale(500, 100)
    # A real Neutron makes 2-7 ports a second on 2 cores: 500 take minutes.
    r = scenario(ctx.ws, count, kind=kind,
                 timeout=300.0 if kind == "fake" else 900.0)
    floor = count * sum(LATENCY) / 2 / WORKERS if kind == "fake" else float("nan")
    lat = summarize(r["pod_to_podport_s"]) if r["pod_to_podport_s"] else {
        "median": float("nan"), "p99": float("nan")}
    f = [
        Figure(NAME, f"burst of {count}: most pods with 2+ ports at once",
               r["most_pods_with_two"], "pods", goal=0),
        Figure(NAME, f"burst of {count}: ports created in all",
               r["ports_posted"], "ports", count, "one per pod"),
        Figure(NAME, f"burst of {count}: pods with exactly one port at the end",
               r["pods_with_one_port"], "pods", count, "pods"),
        Figure(NAME, f"burst of {count}: PodPorts rewritten",
               r["podport_rewrites"], "writes", goal=0),
        Figure(NAME, f"burst of {count}: created -> PodPort p50",
               lat["median"], "s", floor, "Neutron's floor"),
        Figure(NAME, f"burst of {count}: created -> PodPort p99",
               lat["p99"], "s", floor, "Neutron's floor"),
        Figure(NAME, "restart: Neutron writes",
               sum(r["restart_neutron_writes"].values()), "writes", goal=0),
        Figure(NAME, f"burst of {count}: most ports one pod had",
               r["most_ports_one_pod"], "ports", 1, "one"),
    ]
    where = (f"Neutron fake: {LATENCY[0]}-{LATENCY[1]} s a port, {WORKERS} "
             f"creates at once" if kind == "fake" else
             "real Keystone + Neutron (MariaDB, 4 threads)")
    return Outcome(f, raw=r, notes=[
        f"{where}; late commits {r['late_commits']}; settled in "
        f"{r['settled_s']} s; restart: {r['restart_neutron_writes']}"])
