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
  it before the burst; the goal, p99 <= 1.5 s), with ``driver = ovs`` and
  no pool (each pod waits for its port's create), and the Linux bridge
  binding (same controller, same Neutron, no data plane to wait for). With
  ``ovs`` ADD returns once ovn-controller set ``ovn-installed`` on the
  pod's Interface;
- ping round trip and TCP throughput between pods on different nodes
  (through Geneve), against two pods on one node's Linux bridge.
"""
from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

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


def _warm(stack: Any, cluster: Any, per_node: int, timeout: float) -> float:
    """Each node's pool started (a first pod there) and holding
    ``per_node`` free ports bound to it; the seconds it took."""
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
        if min(bound.values()) >= per_node:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"pools not warm after {timeout:.0f} s: "
                               f"{bound}")
        time.sleep(0.5)


def _adds(ctx: Context, stack: Any, mode: str, count: int
          ) -> tuple[list[float], list[float], list[Any], Any, float]:
    """Seconds from pod created to ADD done and to its PodPort written
    for ``count`` pods split over the nodes, the plugged pods, the cluster
    (to close) and how long the pools took to warm (0 without)."""
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
    warmed = _warm(stack, cluster, count // len(nodes), 300) if pools else 0.0
    took: list[float] = []
    announced: list[float] = []
    pods: list[Any] = []
    errors: list[str] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        name = f"{binding}-{i}-{uuid.uuid4().hex[:4]}"
        started = time.monotonic()
        try:
            _, pod = cluster.add(name, nodes[i % len(nodes)])
        except AssertionError as exc:
            with lock:
                errors.append(str(exc)[:300])
            return
        with lock:
            took.append(time.monotonic() - started)
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
    return took, announced, pods, cluster, warmed


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
                took, announced, pods, cluster, warmed = _adds(
                    ctx, stack, mode, count)
                try:
                    path = _path(pods if mode != "bridge" else
                                 [p for p in pods if p.node is pods[0].node],
                                 size) if mode != "ovs+pools" else {}
                finally:
                    cluster.close()
                results[mode] = {"add": summarize(took),
                                 "podport": summarize(announced), **path}
                raw[mode] = {"add_s": took, "podport_s": announced,
                             "warm_s": warmed, **path}
                if warmed:
                    notes.append(f"pools warm (two nodes, {count} free ports "
                                 f"bound) in {warmed:.1f} s")
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
        notes.append("userspace datapath (no openvswitch kernel module): "
                     "every packet crosses ovs-vswitchd")
    finally:
        if stack is not None:
            stack.close()
        cloud.close()
    return Outcome(figures, raw=raw, notes=notes)
