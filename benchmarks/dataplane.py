"""Benchmark dataplane — pods on Neutron's own data plane (OVN), with the
Linux bridge binding as the reference.

Starts the real cloud and the OVN stack of the tests (tests/fixtures/ovn:
OVN central, two simulated nodes on the userspace datapath over a Geneve
underlay, Neutron ML2/OVN), a controller against it and our daemon on each
node, and prints:

- the stack's cold start (real cloud, then OVN central, nodes and the
  ML2/OVN Neutron);
- pod created → ADD done for 20 pods on two nodes (10 each, every ADD
  sent at once the pods exist): with ``[binding] driver = ovs`` ADD returns
  once Neutron says the port is ACTIVE; the reference is the same ADD with
  the Linux bridge binding (same controller, same Neutron, no data plane
  to wait for);
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


def _adds(ctx: Context, stack: Any, binding: str, count: int
          ) -> tuple[list[float], list[Any], Any]:
    """Seconds from pod created to ADD done for ``count`` pods split over
    the nodes, the plugged pods, and the cluster (to close)."""
    from tests.fixtures.ovn.cni import Cluster
    tmp = ctx.ws.tmp / f"dataplane-{binding}"
    tmp.mkdir(parents=True, exist_ok=True)
    # A burst waits for Neutron (its ports are made about one a second
    # here): the figure is how long, so ADD waits longer than the default.
    cluster = Cluster(stack, tmp, lambda: Path(ctx.ws.netns(1)[0]).name,
                      binding=binding, cni_options={"cni_daemon": {
                          "annotation_timeout": 180.0}}).start()
    nodes = stack.fabric.nodes
    took: list[float] = []
    pods: list[Any] = []
    errors: list[str] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        started = time.monotonic()
        try:
            _, pod = cluster.add(f"{binding}-{i}-{uuid.uuid4().hex[:4]}",
                                 nodes[i % len(nodes)])
        except AssertionError as exc:
            with lock:
                errors.append(str(exc)[:300])
            return
        with lock:
            took.append(time.monotonic() - started)
            pods.append(pod)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        cluster.close()
        raise RuntimeError(f"{len(errors)} ADDs failed ({binding}): "
                           f"{errors[0]}")
    return took, pods, cluster


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
            for binding in ("bridge", "ovs"):
                took, pods, cluster = _adds(ctx, stack, binding, count)
                try:
                    path = _path(pods if binding == "ovs" else
                                 [p for p in pods if p.node is pods[0].node],
                                 size)
                finally:
                    cluster.close()
                results[binding] = {"add": summarize(took), **path}
                raw[binding] = {"add_s": took, **path}
        ref, ovs = results["bridge"], results["ovs"]
        for key in ("median", "p99"):
            figures.append(Figure(
                NAME, f"ovs: {count} pods on 2 nodes, created → ADD done "
                      f"(port ACTIVE) {key}", ovs["add"][key] * 1000, "ms",
                ref["add"][key] * 1000, "Linux bridge binding"))
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
