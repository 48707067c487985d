"""Benchmark dataplane — pods on Neutron's own data plane (OVN), with the
Linux bridge binding as the reference.

Starts the real cloud and the OVN stack of the tests (tests/fixtures/ovn:
OVN central, two simulated nodes on the userspace datapath over a Geneve
underlay, Neutron ML2/OVN), a controller against it and our daemon on each
node, and prints:

- the stack's cold start (real cloud, then OVN central, nodes and the
  ML2/OVN Neutron);
- pod created → ADD done for 20 pods on two nodes (10 each, every ADD
  sent at once the pods exist), three ways in the same run: with
  ``[binding] driver = ovs`` and warm per-node port pools (``[vif_pool]``:
  each node's pool started by a first pod and filled with ports bound to
  it, held by the controller, before the burst; the goal, p99 <= 1.5 s;
  the pods served from the pools are counted), with ``driver = ovs`` and
  no pool (each pod waits for its port's create), and the Linux bridge
  binding (same controller, same Neutron, no data plane to wait for). With
  ``ovs`` ADD returns once ovn-controller set ``ovn-installed`` on the
  pod's Interface;
- ping round trip and TCP throughput between pods on different nodes
  (through Geneve), against two pods on one node's Linux bridge;
- each node daemon's idle PSS (master and workers, 5 s after ready, before
  any pod; Kubernetes mode): with ``driver = ovs`` it holds its OVSDB
  connection and monitor (goal 55 MiB), against the Linux bridge binding's
  daemon in the same run.
"""
from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from benchmarks.context import Context, Outcome
from benchmarks.stats import Figure, summarize

NAME = "dataplane"


#: The pools of the warm run: one node's burst (10 pods) served from its
#: pool, refilled in batches of 10 (a fifth of a second a port here).
POOLS = {"enabled": True, "ports_pool_min": 10, "ports_pool_max": 20,
         "ports_pool_batch": 10, "ports_pool_update_frequency": 0.5}
POOL_DEVICE = "kuryr-supervisor-pool"
#: The bindings measured, all in the same run.
MODES = ("bridge", "ovs", "ovs+pools")
#: A node daemon's idle PSS at most (MiB), as the standalone daemon's.
GOAL_IDLE_PSS_MIB = 55.0
#: Seconds after ready before the idle figure (as the memory benchmark's).
IDLE_AFTER = 5.0


def _idle_pss(cluster: Any) -> float:
    """The node daemons' mean PSS (MiB): each master and its workers."""
    totals = []
    for daemon in cluster.daemons.values():
        master = psutil.Process(daemon.pid)
        totals.append(sum(p.memory_full_info().pss for p in
                          (master, *master.children(recursive=True))))
    return sum(totals) / len(totals) / (1 << 20)


def _warm(stack: Any, cluster: Any, per_node: int, timeout: float) -> float:
    """Each node's pool started (a first pod there) and holding
    ``per_node`` free ports bound to it, in Neutron and in the controller's
    pools (its ``/status``: Neutron lists a bulk create's ports bound
    before the controller has its answer, and a pod is served from what
    the controller holds); the seconds it took."""
    started = time.monotonic()
    for node in stack.fabric.nodes:
        cluster.add(f"first-{node.name[-5:]}-{uuid.uuid4().hex[:4]}", node)
    while True:
        bound: dict[str, int] = {n.name: 0 for n in stack.fabric.nodes}
        for port in stack.admin("GET", "/v2.0/ports", device_id=POOL_DEVICE,
                                network_id=stack.network_id
                                ).expect(200)["ports"]:
            if port["binding:vif_type"] == "ovs" and \
                    port["binding:host_id"] in bound:
                bound[port["binding:host_id"]] += 1
        held = cluster.pool_free()
        if min(bound.values()) >= per_node and \
                min(held.get(n, 0) for n in bound) >= per_node:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"pools not warm after {timeout:.0f} s: "
                               f"Neutron {bound}, the controller's {held}")
        time.sleep(0.5)


def _served(cluster: Any) -> tuple[int, int]:
    """Pods served from the pools and pods that found theirs empty, as
    the controller counts them (every node's pool)."""
    rows = cluster.controller.status().get("pools", [])
    return (sum(int(r["hits"]) for r in rows),
            sum(int(r["misses"]) for r in rows))


def _adds(ctx: Context, stack: Any, mode: str, count: int
          ) -> tuple[list[float], list[float], list[Any], Any,
                     dict[str, float], float]:
    """Seconds from pod created to ADD done and to its PodPort written
    for ``count`` pods split over the nodes, the plugged pods, the cluster
    (to close), with pools how long they took to warm and the burst's
    pool hits and misses (empty without), and the node daemons' idle PSS
    (MiB) before the first pod."""
    from tests.fixtures.ovn.cni import Cluster
    tmp = ctx.ws.tmp / f"dataplane-{mode}"
    tmp.mkdir(parents=True, exist_ok=True)
    binding, pools = mode.split("+")[0], mode.endswith("+pools")
    # A burst waits for Neutron (its ports are made about one a second
    # here): the figure is how long, so ADD waits longer than the default.
    cluster = Cluster(stack, tmp, lambda: Path(ctx.ws.netns(1)[0]).name,
                      binding=binding, cni_options={"cni_daemon": {
                          "annotation_timeout": 180.0}},
                      controller_options={"vif_pool": POOLS} if pools
                      else None).start()
    nodes = stack.fabric.nodes
    pooled: dict[str, float] = {}
    time.sleep(IDLE_AFTER)
    idle = _idle_pss(cluster)
    if pools:
        pooled["warm_s"] = _warm(stack, cluster, count // len(nodes), 300)
        before = _served(cluster)
    took: list[float] = []
    announced: list[float] = []
    pods: list[Any] = []
    errors: list[str] = []
    lock = threading.Lock()

    # The pods' namespaces are made before they are (a runtime's sandbox
    # is there when it sends ADD), and ADD is done when the shim returns,
    # not once the harness has read the pod's port from Neutron.
    netns = [Path(path).name for path in ctx.ws.netns(count)]

    def one(i: int) -> None:
        name = f"{binding}-{i}-{uuid.uuid4().hex[:4]}"
        started = time.monotonic()
        try:
            _, pod = cluster.add(name, nodes[i % len(nodes)], netns=netns[i])
        except AssertionError as exc:
            with lock:
                errors.append(str(exc)[:300])
            return
        with lock:
            took.append(cluster.added_at[name] - started)
            announced.append(cluster.api.podport_times[("default", name)]
                             - started)
            pods.append(pod)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        cluster.close()
        raise RuntimeError(f"{len(errors)} ADDs failed ({mode}): "
                           f"{errors[0]}")
    if pools:
        after = _served(cluster)
        pooled["hits"] = after[0] - before[0]
        pooled["misses"] = after[1] - before[1]
    return took, announced, pods, cluster, pooled, idle


def _path(pods: list[Any], size: int) -> dict[str, float]:
    """Ping rtt (ms) and TCP throughput (MB/s) from the first pod to the
    first pod of another node, or of the same node when ``pods`` are all on
    one bridge."""
    from tests.fixtures.ovn.fabric import ping, received, rtt_ms, tcp_transfer
    src = pods[0]
    others = [p for p in pods[1:] if p.node is not src.node] or pods[1:]
    dst = others[0]
    deadline = time.monotonic() + 20
    while received(ping(src, dst.address, count=1)) != 1:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no echo from {dst.address}")
    rtt = rtt_ms(ping(src, dst.address, count=20, wait=1))
    transfer = tcp_transfer(src, dst, size)
    if transfer.received_digest != transfer.sent_digest:
        raise RuntimeError("TCP transfer corrupted")
    return {"rtt_ms": rtt, "mbps": size / transfer.seconds / 1e6}


def run(ctx: Context) -> Outcome:
    from tests.fixtures.ovn.stack import OvnStack
    from tests.fixtures.realcloud import RealCloud
    figures: list[Figure] = []
    raw: dict[str, Any] = {}
    notes: list[str] = []
    count = ctx.scale(20, 4)
    size = ctx.scale(100_000_000, 10_000_000)
    cloud = RealCloud()
    stack: OvnStack | None = None
    try:
        started = time.monotonic()
        cloud.start()
        stack = OvnStack(cloud).start()
        cold = time.monotonic() - started
        notes.append("stack start: real cloud " + ", ".join(
            f"{k} {v:.1f} s" for k, v in cloud.timings.items()) +
            "; OVN " + ", ".join(f"{k} {v:.1f} s"
                                 for k, v in stack.timings.items()))
        figures.append(Figure(NAME, "cold start: real cloud + OVN stack",
                              cold, "s"))
        results: dict[str, dict[str, Any]] = {}
        with stack.in_catalog():
            for mode in MODES:
                took, announced, pods, cluster, pool_figs, idle = _adds(
                    ctx, stack, mode, count)
                try:
                    path = _path(pods if mode != "bridge" else
                                 [p for p in pods if p.node is pods[0].node],
                                 size) if mode != "ovs+pools" else {}
                finally:
                    cluster.close()
                results[mode] = {"add": summarize(took),
                                 "podport": summarize(announced),
                                 "node": summarize([t - a for t, a in zip(
                                     took, announced, strict=True)]),
                                 "idle_pss_mib": idle, **path}
                raw[mode] = {"add_s": took, "podport_s": announced,
                             "idle_pss_mib": idle, **pool_figs, **path}
                if pool_figs:
                    notes.append(
                        f"pools warm (two nodes, {count} free ports bound, "
                        f"held by the controller) in {pool_figs['warm_s']:.1f} "
                        f"s; the burst: {pool_figs['hits']:.0f} pods served "
                        f"from the pools, {pool_figs['misses']:.0f} found "
                        f"theirs empty")
        ref, ovs = results["bridge"], results["ovs"]
        pooled = results["ovs+pools"]
        for key in ("median", "p99"):
            figures.append(Figure(
                NAME, f"ovs, warm pools: {count} pods on 2 nodes, created "
                      f"→ ADD done (ovn-installed) {key}",
                pooled["add"][key] * 1000, "ms", ovs["add"][key] * 1000,
                "ovs, no pool", goal=1500.0 if key == "p99" else None))
        figures.append(Figure(
            NAME, "  of which created → PodPort written (warm pools) p99",
            pooled["podport"]["p99"] * 1000, "ms",
            ovs["podport"]["p99"] * 1000, "ovs, no pool"))
        figures.append(Figure(
            NAME, "  the node's part, PodPort written → ADD done (warm "
                  "pools) p99", pooled["node"]["p99"] * 1000, "ms",
            ovs["node"]["p99"] * 1000, "ovs, no pool"))
        for key in ("median", "p99"):
            figures.append(Figure(
                NAME, f"ovs, no pool: {count} pods on 2 nodes, created → "
                      f"ADD done (ovn-installed) {key}",
                ovs["add"][key] * 1000, "ms", ref["add"][key] * 1000,
                "Linux bridge binding"))
        figures.append(Figure(NAME, "ovs: ping rtt between nodes (Geneve)",
                              ovs["rtt_ms"], "ms", ref["rtt_ms"],
                              "one node's Linux bridge"))
        figures.append(Figure(NAME, "ovs: TCP between nodes (Geneve)",
                              ovs["mbps"], "MB/s", ref["mbps"],
                              "one node's Linux bridge"))
        figures.append(Figure(
            NAME, "ovs: node daemon idle PSS (OVSDB connection held, "
                  "Kubernetes mode)", ovs["idle_pss_mib"], "MiB",
            ref["idle_pss_mib"], "Linux bridge binding's daemon",
            goal=GOAL_IDLE_PSS_MIB))
        notes.append("userspace datapath (no openvswitch kernel module): "
                     "every packet crosses ovs-vswitchd")
    finally:
        if stack is not None:
            stack.close()
        cloud.close()
    return Outcome(figures, raw=raw, notes=notes)
