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
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Any

from benchmarks.context import Context, Outcome
from benchmarks.harness import Workspace, wait_until
from benchmarks.stats import Figure, summarize

NAME = "controller-slow"
LATENCY = (0.1, 0.4)            # seconds of Neutron work per port
WORKERS = 4                     # creates Neutron works on at once
WRITES = ("POST", "PUT", "DELETE")


class Sampler(threading.Thread):
    """Neutron's store every 20 ms: the worst duplicates seen."""

    def __init__(self, neutron: Any) -> None:
        super().__init__(daemon=True)
        self.neutron, self.stop = neutron, threading.Event()
        self.most_ports = self.most_pods = 0

    def run(self) -> None:
        while not self.stop.wait(0.02):
            with self.neutron.lock:
                per = collections.Counter(p["device_id"] for p in
                                          self.neutron.ports.values())
            self.most_ports = max([self.most_ports, *per.values()])
            self.most_pods = max(self.most_pods,
                                 sum(1 for n in per.values() if n > 1))


def scenario(ws: Workspace, count: int, *, timeout: float = 300.0
             ) -> dict[str, Any]:
    from tests.fixtures.controller import start_cloud
    cloud = start_cloud(cidr="10.32.0.0/16", gateway="10.32.0.1")
    api, neutron = cloud.api, cloud.neutron
    neutron.faults.port_latency, neutron.faults.workers = LATENCY, WORKERS
    daemon = ws.daemon({
        "DEFAULT": {"role": "controller"},
        "kubernetes": {"api_root": api.url, "node_name": "bench-node"},
        "controller": {"pod_network_id": neutron.network_id,
                       "pod_subnet_id": neutron.subnet["id"]},
        "neutron": cloud.keystone.conf_overrides()}, start=False)
    out: dict[str, Any] = {"pods": count}
    sampler = Sampler(neutron)
    try:
        daemon.start()
        daemon.wait_ready(60)
        sampler.start()
        created: dict[tuple[str, str], float] = {}
        for i in range(count):
            api.add_pod(f"ns{i % 5}", f"p{i}", f"node-{i % 10}")
            created[(f"ns{i % 5}", f"p{i}")] = time.monotonic()
        t0 = time.monotonic()
        uids = [p["metadata"]["uid"] for p in api.pods.values()]

        def settled() -> bool:
            return len(api.podports) == count and all(
                len(neutron.ports_for(uid)) == 1 for uid in uids)
        try:
            wait_until(settled, timeout, 0.2)
            out["settled_s"] = time.monotonic() - t0
        except Exception:  # noqa: BLE001 - reported as not settled
            out["settled_s"] = None
        sampler.stop.set()
        sampler.join()
        out["most_ports_one_pod"] = sampler.most_ports
        out["most_pods_with_two"] = sampler.most_pods
        out["ports_posted"] = sum(neutron.bulk_sizes) + sum(
            1 for _, m, p in neutron.requests if m == "POST"
            and p == "/v2.0/ports") - len(neutron.bulk_sizes)
        out["ports_now"] = len(neutron.ports)
        out["pods_with_one_port"] = sum(
            1 for uid in uids if len(neutron.ports_for(uid)) == 1)
        out["late_commits"] = neutron.faults.late_commits
        out["podport_rewrites"] = sum(
            1 for _, kind, obj in api.events if kind == "MODIFIED"
            and obj.get("kind") == "PodPort")
        out["pod_to_podport_s"] = [api.podport_times[k] - t for k, t in
                                   created.items() if k in api.podport_times]
        # a restart: no write to Neutron
        daemon.close()
        wall = time.time()
        daemon.start()
        daemon.wait_ready(120)
        time.sleep(5)
        out["restart_neutron_writes"] = {
            k: n for k, n in neutron.counts(wall).items()
            if k.split()[0] in WRITES}
    finally:
        sampler.stop.set()
        daemon.close()
        cloud.stop()
    return out


def run(ctx: Context) -> Outcome:
    count = ctx.scale(500, 100)
    r = scenario(ctx.ws, count)
    floor = count * sum(LATENCY) / 2 / WORKERS
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
    ]
    return Outcome(f, raw=r, notes=[
        f"Neutron fake: {LATENCY[0]}-{LATENCY[1]} s a port, {WORKERS} creates "
        f"at once, late commits {r['late_commits']}; settled in "
        f"{r['settled_s']} s"])
