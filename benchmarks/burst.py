"""Benchmark 2 — a burst: 50 ADDs at once, then 50 DELs, each implementation.

What a node sees when a ReplicaSet scales up: the runtime execs the plugin
for every pod at the same time (here: 50 cnitool processes at once). The
wall time of the whole burst is what delays the last pod. Each
implementation (kuryr-cni in Go, in Python, bridge+host-local) runs the
burst three times, the order rotating each round, and the median wall is
quoted, so one noisy moment on a shared machine does not decide the ratio.

Goals (compiled shim): ADD burst wall <= 0.8x the reference's, DEL burst
wall <= 1.0x. The Python shim is quoted beside it without a goal.
"""
from __future__ import annotations

import statistics

from benchmarks.cni_latency import rotate
from benchmarks.context import Context, Outcome
from benchmarks.plugins import burst, pods
from benchmarks.stats import Figure

NAME = "burst"
GOALS = {"ADD": 0.8, "DEL": 1.0}


def run(ctx: Context) -> Outcome:
    size, rounds = ctx.scale(50, 8), ctx.scale(3, 1)
    shims, ref = ctx.shims(), ctx.reference()
    every = [*shims, ref]
    walls: dict[str, dict[str, list[float]]] = {
        p.name: {"ADD": [], "DEL": []} for p in every}
    for i in range(rounds):
        for plugin in rotate(every, i):
            netns = ctx.netns_pool(f"burst-{plugin.name}", size)
            add, delete = burst(plugin, pods(netns, f"burst{i}"))
            walls[plugin.name]["ADD"].append(add)
            walls[plugin.name]["DEL"].append(delete)
    med = {name: {cmd: statistics.median(v) for cmd, v in w.items()}
           for name, w in walls.items()}
    figures = [
        Figure(NAME, f"{shim.name}: {size} parallel {cmd} wall (median of {rounds})",
               med[shim.name][cmd], "s", med[ref.name][cmd], ref.name,
               goal=GOALS[cmd] if n == 0 else None, goal_on="ratio")
        for n, shim in enumerate(shims) for cmd in ("ADD", "DEL")]
    return Outcome(figures, raw={"walls_s": walls},
                   notes=[f"{size} threads each exec cnitool at once; {rounds} rounds per "
                          "implementation, order rotating; the same netns reused per round "
                          "(each DEL leaves it empty)."])
