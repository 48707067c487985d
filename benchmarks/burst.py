"""Benchmark 2 — a burst: 50 ADDs at once, then 50 DELs, both implementations.

What a node sees when a ReplicaSet scales up: the runtime execs the plugin
for every pod at the same time. The wall time of the whole burst is what
delays the last pod. Each implementation runs the burst three times,
alternating which goes first in a round, and the median wall is quoted, so
one noisy moment on a shared machine does not decide the ratio.

Goal: each burst wall (ADD and DEL) <= 1x the reference's.
"""
from __future__ import annotations

import statistics

from benchmarks.context import Context, Outcome
from benchmarks.plugins import burst, pods
from benchmarks.stats import Figure

NAME = "burst"
GOAL_RATIO = 1.0


def run(ctx: Context) -> Outcome:
    size, rounds = ctx.scale(50, 8), ctx.scale(3, 1)
    kuryr, ref = ctx.plugins()
    walls: dict[str, dict[str, list[float]]] = {
        p.name: {"ADD": [], "DEL": []} for p in (kuryr, ref)}
    for i in range(rounds):
        for plugin in (kuryr, ref) if i % 2 == 0 else (ref, kuryr):
            netns = ctx.netns_pool(f"burst-{plugin.name}", size)
            add, delete = burst(plugin, pods(netns, f"burst{i}"))
            walls[plugin.name]["ADD"].append(add)
            walls[plugin.name]["DEL"].append(delete)
    med = {name: {cmd: statistics.median(v) for cmd, v in w.items()}
           for name, w in walls.items()}
    figures = [
        Figure(NAME, f"{size} parallel {cmd} wall (median of {rounds})",
               med[kuryr.name][cmd], "s", med[ref.name][cmd], "bridge+host-local",
               goal=GOAL_RATIO, goal_on="ratio")
        for cmd in ("ADD", "DEL")]
    return Outcome(figures, raw={"walls_s": walls},
                   notes=[f"{size} threads each exec the plugin at once; {rounds} rounds "
                          "per implementation, alternating order; the same netns reused "
                          "per round (each DEL leaves it empty)."])
