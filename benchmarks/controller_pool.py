"""Benchmark controller-pool — a burst of pods with and without a port pool.

A real controller daemon against the Kubernetes API fake and, in the same
run, two clouds:

- **fake**: the Keystone fake and a Neutron fake that takes a real
  Neutron's time (:mod:`tests.fixtures.poolcloud`: ``PORT_DELAY`` seconds
  per port of a create, concurrent requests served concurrently — what a
  Neutron 29 on MariaDB measured, 0.105-0.155 s a port whatever the batch
  — and ``UPDATE_DELAY`` per port update);
- **real**: a real Keystone and Neutron on MariaDB
  (:mod:`tests.fixtures.realcloud`), when it can run here (its cached venv
  and mariadb-server); otherwise the notes say why it was skipped.

``KURYR_BENCH_CLOUD=fake`` or ``real`` runs one of them only.
``KURYR_BENCH_POLICY=1`` runs the ``network_policy`` handler beside the
port handler, with a NetworkPolicy in the pods' namespace that selects
half the burst's pods and names the other half as its peers: each port is
made in its policy's groups, or its address put in the peers' address
group, before its PodPort (the labels are there either way). Each node's
resident is one the policy selects, so each node also keeps a closed pool
(ports in no group, for the selected pods,
:mod:`kuryr_supervisor.controller.pools.portpools`); on the fake cloud,
the time until each selected pod's port is in its policy's group is
measured too (a closed port admits nothing until its claim is applied).

Pools are per node (ports bound to it), so the burst is spread over
``NODES`` nodes, each already running one pod (its *resident*, made before
the daemon starts: the daemon's first list gives each node its pool, and
the resident's port is a miss). On each cloud:

1. **reference, no pool**: a burst of ``BURST`` pods (over the nodes)
   created as fast as the fake API takes them; pod created -> PodPort
   written, p50 and p99;
2. **warm pools** (``[vif_pool] enabled``, ``ports_pool_min`` = the
   burst's share of a node): every node's pool filled first, then the same
   burst; the same figures, each node's hits and misses from ``/status``,
   and the time from the last PodPort until every pool is full again.

Both count the pods' ports in Neutron at the end: duplicates (ports beyond
one per pod) and pods without one. Goal: p99 <= 1 s with a warm pool, 0
duplicates, the pool refilled. Each scenario has its own ``cluster_id``
(its own tag), so the runs on one real cloud never see each other's ports.
"""
from __future__ import annotations

import collections
import json
import os
import time
import uuid
from typing import Any

from benchmarks.context import Context, Outcome
from benchmarks.harness import Workspace, wait_until
from benchmarks.stats import Figure, summarize

NAME = "controller-pool"
PORT_DELAY, UPDATE_DELAY = 0.15, 0.05
GOAL_P99_S = 1.0
POOL_DEVICE = "kuryr-supervisor-pool"
NODES = 4


class FakeCloud:
    """The fakes: Keystone, and Neutron at a real Neutron's pace."""

    kind = "fake"

    def __init__(self) -> None:
        from tests.fixtures.openstack import FakeKeystone
        from tests.fixtures.poolcloud import PooledNeutron
        self.keystone = FakeKeystone().start()
        self.neutron = PooledNeutron(
            self.keystone, cidr="10.31.0.0/20", gateway="10.31.0.1",
            port_delay=PORT_DELAY, update_delay=UPDATE_DELAY).start()
        self.network_id = self.neutron.network_id
        self.subnet_id = self.neutron.subnet["id"]

    def conf_overrides(self) -> dict[str, str]:
        return dict(self.keystone.conf_overrides())

    def by_device(self, tag: str) -> collections.Counter[str]:
        with self.neutron.lock:
            return collections.Counter(
                p["device_id"] for p in self.neutron.ports.values()
                if tag in p["tags"])

    def requests(self, since: float) -> dict[str, int]:
        return dict(self.neutron.counts(since))

    def in_policy(self, tag: str) -> set[str]:
        """The pods (device ids) whose port carries a policy's group."""
        with self.neutron.lock:
            names = {g["id"]: g["name"]
                     for g in self.neutron.groups.all_groups()}
            return {p["device_id"] for p in self.neutron.ports.values()
                    if tag in p["tags"] and any(
                        names.get(g, "").startswith(f"{tag}:np:")
                        for g in p["security_groups"])}

    def close(self) -> None:
        self.neutron.stop()
        self.keystone.stop()


class RealCloud:
    """A real Keystone and Neutron (:mod:`tests.fixtures.realcloud`)."""

    kind = "real"

    def __init__(self) -> None:
        from tests.fixtures.realcloud import RealCloud as Cloud
        self.cloud = Cloud().start()
        self.network_id = self.cloud.network_id
        self.subnet_id = self.cloud.subnet_id

    def conf_overrides(self) -> dict[str, str]:
        return dict(self.cloud.conf_overrides())

    def by_device(self, tag: str) -> collections.Counter[str]:
        return collections.Counter(
            p["device_id"] for p in self.cloud.ports(tags=tag,
                                                     fields="device_id"))

    def requests(self, since: float) -> dict[str, int]:
        return {}

    def close(self) -> None:
        self.cloud.close()


def scenario(ws: Workspace, cloud: Any, burst: int, *, pool: bool,
             timeout: float = 600.0) -> dict[str, Any]:
    from tests.fixtures.fakeapi import FakeAPI
    api = FakeAPI().start()
    try:
        return _burst(ws, api, cloud, burst, pool, timeout)
    finally:
        api.stop()


def _burst(ws: Workspace, api: Any, cloud: Any, burst: int, pool: bool,
           timeout: float) -> dict[str, Any]:
    cluster = f"bench-{uuid.uuid4().hex[:12]}"
    tag = f"kuryr-supervisor:{cluster}"
    options: dict[str, dict[str, Any]] = {
        "DEFAULT": {"role": "controller"},
        "kubernetes": {"api_root": api.url, "node_name": "bench-node"},
        "controller": {"pod_network_id": cloud.network_id,
                       "pod_subnet_id": cloud.subnet_id,
                       "cluster_id": cluster},
        "neutron": cloud.conf_overrides()}
    policy = os.environ.get("KURYR_BENCH_POLICY", "") == "1"
    if policy:                  # every pod selected or a peer (module)
        options["controller"]["handlers"] = "neutron_port,network_policy"
        api.add_namespace("bench", {"team": "bench"})
        api.put_networkpolicy("bench", "web", {
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {
                "role": "client"}}}], "ports": [{"port": 80}]}]})
    share = -(-burst // NODES)              # a node's part of the burst
    if pool:
        options["vif_pool"] = {"enabled": True, "ports_pool_min": share,
                               "ports_pool_max": share + 10,
                               "ports_pool_batch": min(share, 25),
                               "ports_pool_update_frequency": 1.0}
    nodes = [f"node-{n}" for n in range(NODES)]
    residents = []
    for node in nodes:                      # a pod on each node: its pool
        residents.append(str(uuid.uuid4()))
        api.load_pods([{"kind": "Pod", "apiVersion": "v1", "metadata": {
            "namespace": "bench", "name": f"resident-{node}",
            "uid": residents[-1],
            # With the policy, one it selects: the node's closed pool.
            "labels": {"app": "web"} if policy else {}},
            "spec": {"nodeName": node, "containers": [
                {"name": "c"}]}, "status": {"phase": "Running"}}])
    wall = time.time()
    daemon = ws.daemon(options)
    out: dict[str, Any] = {"cloud": cloud.kind, "pool": pool, "burst": burst,
                           "nodes": NODES}

    def pooled() -> int:
        return cloud.by_device(tag)[POOL_DEVICE]

    def rows() -> dict[str, dict[str, Any]]:
        """Each node's pools as the pools count them (/status; a closed
        pool's row as "<node> closed"): a bulk create Neutron committed
        may not have been answered yet."""
        code, body = daemon.get("/status")
        got = json.loads(body).get("pools") if code == 200 else None
        return {r["node"] + (" closed" if r["pool"].endswith("/closed")
                             else ""): r for r in got or ()}

    # With the policy, each node also keeps a closed pool (its resident).
    keys = nodes + ([f"{n} closed" for n in nodes] if policy else [])

    def full() -> bool:
        got = rows()
        return all(got.get(n, {}).get("free", 0) >= share for n in keys)
    if pool:
        t0 = time.monotonic()
        wait_until(full, timeout, 0.5)
        out["warm_s"] = time.monotonic() - t0
    created: dict[tuple[str, str], float] = {}
    uids = []
    for i in range(burst):
        uid = str(uuid.uuid4())
        uids.append(uid)
        pod = {"kind": "Pod", "apiVersion": "v1",
               "metadata": {"namespace": "bench", "name": f"pod{i}", "uid": uid,
                            "labels": {"app": "web"} if i % 2 else {
                                "role": "client"}},
               "spec": {"nodeName": nodes[i % NODES],
                        "containers": [{"name": "c"}]},
               "status": {"phase": "Pending"}}
        created[("bench", f"pod{i}")] = time.monotonic()
        api.load_pods([pod])
    # The selected pods (odd ones): when their port is in their policy's
    # group (the fake cloud only: polled).
    selected = {uids[i]: created[("bench", f"pod{i}")]
                for i in range(1, burst, 2)} if policy else {}
    effective: dict[str, float] = {}
    polled = hasattr(cloud, "in_policy")

    def settled() -> bool:
        if polled and len(effective) < len(selected):
            now = time.monotonic()
            for uid in cloud.in_policy(tag) & set(selected):
                effective.setdefault(uid, now)
        return all(k in api.podport_times for k in created) and (
            not polled or len(effective) == len(selected))
    wait_until(settled, timeout, 0.02)
    out["latency_s"] = [api.podport_times[k] - t for k, t in created.items()]
    out["in_groups_s"] = [effective[u] - t for u, t in selected.items()
                          if u in effective]
    if pool:                    # from the last PodPort to a full pool again
        last = max(api.podport_times[k] for k in created)
        wait_until(lambda: full() and pooled() >= share * len(keys),
                   timeout, 0.2)
        out["refill_s"] = time.monotonic() - last
    time.sleep(5.0)             # late commits of anything retried show now
    counts = cloud.by_device(tag)
    out["duplicates"] = sum(max(0, counts[u] - 1) for u in uids + residents)
    out["without_port"] = sum(1 for u in uids + residents if not counts[u])
    if pool:
        out["per_node"] = {n: {k: r.get(k) for k in ("hits", "misses", "free")}
                           for n, r in sorted(rows().items())}
    out["neutron"] = cloud.requests(wall)
    out["log"] = _warnings(daemon.log_path.read_text(errors="replace"))
    daemon.close()              # the next scenario runs alone
    return out


def _warnings(log: str, most: int = 40) -> list[str]:
    """The daemon's distinct warnings and errors (message text, first
    ``most``), kept with the figures: the workspace is removed."""
    seen: dict[str, None] = {}
    for line in log.splitlines():
        if " WARNING " in line or " ERROR " in line:
            text = line.split(" [-] ", 1)[-1][:200]
            seen.setdefault(text, None)
    return list(seen)[:most]


def _figures(kind: str, ref: dict[str, Any], warm: dict[str, Any]
             ) -> list[Figure]:
    r, w = summarize(ref["latency_s"]), summarize(warm["latency_s"])
    burst = warm["burst"]
    figures = [Figure(NAME, f"{kind}: pod created -> PodPort {key}, warm pools "
                      f"(burst of {burst} over {warm['nodes']} nodes)",
                      w[key] * 1000, "ms",
                      r[key] * 1000, "no pool",
                      goal=GOAL_P99_S * 1000 if key == "p99" else None)
               for key in ("median", "p99")]
    figures += [
        Figure(NAME, f"{kind}: duplicate ports, warm pool",
               float(warm["duplicates"]), "ports", float(ref["duplicates"]),
               "no pool", goal=0.0),
        Figure(NAME, f"{kind}: pods without a port, warm pool",
               float(warm["without_port"]), "pods",
               float(ref["without_port"]), "no pool"),
        Figure(NAME, f"{kind}: every node's pool refilled after the burst",
               warm["refill_s"] * 1000, "ms"),
        Figure(NAME, f"{kind}: every node's pool warmed from empty",
               warm["warm_s"] * 1000, "ms"),
        Figure(NAME, f"{kind}: burst pods served from their node's pool",
               float(sum(r["hits"] for r in warm["per_node"].values())),
               "pods", float(burst), "burst")]
    if warm.get("in_groups_s") and ref.get("in_groups_s"):
        r, w = summarize(ref["in_groups_s"]), summarize(warm["in_groups_s"])
        figures += [Figure(
            NAME, f"{kind}: selected pod created -> its port in its "
            f"policy's group {key}, warm pools", w[key] * 1000, "ms",
            r[key] * 1000, "no pool") for key in ("median", "p99")]
    return figures


def run(ctx: Context) -> Outcome:
    burst = ctx.scale(100, 10)
    figures: list[Figure] = []
    raw: dict[str, Any] = {}
    notes = [f"fake: Neutron at {PORT_DELAY}s a port created, {UPDATE_DELAY}s "
             f"a port updated, concurrent; goal: p99 <= {GOAL_P99_S}s with a "
             "warm pool, 0 duplicates, refilled"]
    only = os.environ.get("KURYR_BENCH_CLOUD", "")
    for make in (FakeCloud, RealCloud):
        if only and make.kind != only:
            continue
        try:
            cloud = make()
        except Exception as exc:  # noqa: BLE001 - reported, the rest runs
            notes.append(f"{make.kind}: not measured ({exc})")
            continue
        try:
            ref = scenario(ctx.ws, cloud, burst, pool=False)
            warm = scenario(ctx.ws, cloud, burst, pool=True)
        finally:
            cloud.close()
        raw[make.kind] = {"reference": ref, "pool": warm}
        figures += _figures(make.kind, ref, warm)
        for node, row in warm["per_node"].items():
            notes.append(f"{make.kind}: {node or 'unbound'}: hits "
                         f"{row['hits']}, misses {row['misses']} (its "
                         f"resident's included), free {row['free']} after "
                         "the refill")
    return Outcome(figures, raw=raw, notes=notes)
