"""Benchmark controller-pool — a burst of pods with and without a port pool.

A real controller daemon against the Kubernetes API and Keystone fakes and
a Neutron fake that takes a real Neutron's time (:mod:`tests.fixtures.
poolcloud`: ``PORT_DELAY`` seconds per port of a create, concurrent
requests served concurrently — what a Neutron 29 on MariaDB measured,
0.105-0.155 s a port whatever the batch — and ``UPDATE_DELAY`` per port
update). In the same run:

1. **reference, no pool**: a burst of ``BURST`` pods created as fast as the
   fake takes them; pod created -> PodPort written, p50 and p99;
2. **warm pool** (``[vif_pool] enabled``, ``ports_pool_min`` = the burst):
   the pool filled first, then the same burst; the same figures, the
   pool's hits and misses from ``/status``, and the time until the pool
   is refilled after the burst.

Both count the pods' ports in Neutron at the end: duplicates (a pod with
more than one port) and pods without one. Goal: p99 <= 1 s with a warm
pool, 0 duplicates, the pool refilled.
"""
from __future__ import annotations

import json
import time
import uuid
from typing import Any

from benchmarks.context import Context, Outcome
from benchmarks.harness import Workspace, wait_until
from benchmarks.stats import Figure, summarize

NAME = "controller-pool"
PORT_DELAY, UPDATE_DELAY = 0.15, 0.05
GOAL_P99_S = 1.0


def scenario(ws: Workspace, burst: int, *, pool: bool,
             timeout: float = 300.0) -> dict[str, Any]:
    from tests.fixtures.fakeapi import FakeAPI
    from tests.fixtures.openstack import FakeKeystone
    from tests.fixtures.poolcloud import PooledNeutron
    api, keystone = FakeAPI().start(), FakeKeystone().start()
    neutron = PooledNeutron(keystone, cidr="10.31.0.0/20", gateway="10.31.0.1",
                            port_delay=PORT_DELAY,
                            update_delay=UPDATE_DELAY).start()
    try:
        return _burst(ws, api, keystone, neutron, burst, pool, timeout)
    finally:
        neutron.stop()
        keystone.stop()
        api.stop()


def _burst(ws: Workspace, api: Any, keystone: Any, neutron: Any, burst: int,
           pool: bool, timeout: float) -> dict[str, Any]:
    options: dict[str, dict[str, Any]] = {
        "DEFAULT": {"role": "controller"},
        "kubernetes": {"api_root": api.url, "node_name": "bench-node"},
        "controller": {"pod_network_id": neutron.network_id,
                       "pod_subnet_id": neutron.subnet["id"]},
        "neutron": keystone.conf_overrides()}
    if pool:
        options["vif_pool"] = {"enabled": True, "ports_pool_min": burst,
                               "ports_pool_max": burst + 25,
                               "ports_pool_batch": 25,
                               "ports_pool_update_frequency": 1.0}
    daemon = ws.daemon(options)
    out: dict[str, Any] = {"pool": pool, "burst": burst}
    if pool:
        t0 = time.monotonic()
        wait_until(lambda: len(neutron.pool_ports()) >= burst, timeout, 0.1)
        out["warm_s"] = time.monotonic() - t0
    created: dict[tuple[str, str], float] = {}
    uids = []
    for i in range(burst):
        uid = str(uuid.uuid4())
        uids.append(uid)
        pod = {"kind": "Pod", "apiVersion": "v1",
               "metadata": {"namespace": "bench", "name": f"pod{i}", "uid": uid},
               "spec": {"nodeName": f"node-{i % 10}",
                        "containers": [{"name": "c"}]},
               "status": {"phase": "Pending"}}
        created[("bench", f"pod{i}")] = time.monotonic()
        api.load_pods([pod])
    wait_until(lambda: all(k in api.podport_times for k in created), timeout, 0.02)
    out["latency_s"] = [api.podport_times[k] - t for k, t in created.items()]
    if pool:                    # from the last PodPort to a full pool again
        last = max(api.podport_times[k] for k in created)
        wait_until(lambda: len(neutron.pool_ports()) >= burst, timeout, 0.05)
        out["refill_s"] = time.monotonic() - last
    time.sleep(2.0)             # late commits of anything retried show now
    counts = [len(neutron.ports_for(uid)) for uid in uids]
    out["duplicates"] = sum(max(0, n - 1) for n in counts)
    out["without_port"] = sum(1 for n in counts if n == 0)
    if pool:
        code, body = daemon.get("/status")
        out["status_pools"] = json.loads(body).get("pools") if code == 200 else None
        code, body = daemon.get("/metrics")
        out["metrics_lines"] = [line for line in body.splitlines()
                                if line.startswith("kuryr_supervisor_port_pool_")]
    out["neutron"] = dict(neutron.counts())
    return out


def run(ctx: Context) -> Outcome:
    burst = ctx.scale(100, 10)
    ref = scenario(ctx.ws, burst, pool=False)
    warm = scenario(ctx.ws, burst, pool=True)
    r, w = summarize(ref["latency_s"]), summarize(warm["latency_s"])
    figures = [Figure(NAME, f"pod created -> PodPort {key}, warm pool "
                      f"(burst of {burst})", w[key] * 1000, "ms",
                      r[key] * 1000, "no pool",
                      goal=GOAL_P99_S * 1000 if key == "p99" else None)
               for key in ("median", "p99")]
    figures += [
        Figure(NAME, "duplicate ports, warm pool", float(warm["duplicates"]),
               "ports", float(ref["duplicates"]), "no pool", goal=0.0),
        Figure(NAME, "pods without a port, warm pool",
               float(warm["without_port"]), "pods",
               float(ref["without_port"]), "no pool"),
        Figure(NAME, "pool refilled after the burst", warm["refill_s"] * 1000,
               "ms"),
        Figure(NAME, "pool warmed from empty", warm["warm_s"] * 1000, "ms")]
    return Outcome(figures, raw={"reference": ref, "pool": warm},
                   notes=[f"Neutron fake at {PORT_DELAY}s a port created, "
                          f"{UPDATE_DELAY}s a port updated, concurrent; goal: "
                          f"p99 <= {GOAL_P99_S}s with a warm pool, 0 "
                          "duplicates, refilled; /status pools: "
                          f"{warm.get('status_pools')}"])
