"""Benchmark 1 — sequential CNI latency, kuryr-cni against the reference.

30 pods, one at a time: ADD each into its own netns, then DEL each. The two
implementations are interleaved call by call (kuryr first on even pods, the
reference first on odd ones) so a noisy neighbour slows both alike rather
than whichever happened to run during it. Each side first does one
untimed ADD+DEL (reported as "cold ADD"): the first call pays for page-cache
and lazy imports once per daemon, not once per pod.

Goal: kuryr-cni's ADD median <= 2x the reference's.
"""
from __future__ import annotations

from benchmarks.context import Context, Outcome
from benchmarks.plugins import Plugin, pods
from benchmarks.stats import Figure, summarize

NAME = "cni-latency"
GOAL_ADD_RATIO = 2.0


def _sequence(order: list[Plugin], work: dict[str, list[tuple[str, str]]],
              command: str, samples: dict[str, list[float]], index: int) -> None:
    for plugin in order:
        cid, netns = work[plugin.name][index]
        samples[plugin.name].append(plugin.call(command, cid, netns))


def run(ctx: Context) -> Outcome:
    count = ctx.scale(30, 5)
    kuryr, ref = ctx.plugins()
    both = [kuryr, ref]
    cold = {}
    for plugin in both:
        (cid, netns), = pods(ctx.ws.netns(1), "cold")
        cold[plugin.name] = plugin.call("ADD", cid, netns)
        plugin.call("DEL", cid, netns)
    work = {p.name: pods(ctx.ws.netns(count), "seq") for p in both}
    adds: dict[str, list[float]] = {p.name: [] for p in both}
    dels: dict[str, list[float]] = {p.name: [] for p in both}
    for i in range(count):
        _sequence(both if i % 2 == 0 else both[::-1], work, "ADD", adds, i)
    for i in range(count):
        _sequence(both if i % 2 == 0 else both[::-1], work, "DEL", dels, i)
    stats = {name: {"ADD": summarize(adds[name]), "DEL": summarize(dels[name])}
             for name in adds}
    k, r = stats[kuryr.name], stats[ref.name]
    figures = []
    for command in ("ADD", "DEL"):
        for key in ("median", "p90"):
            goal = GOAL_ADD_RATIO if (command, key) == ("ADD", "median") else None
            figures.append(Figure(
                NAME, f"sequential {command} {key} (n={count})",
                k[command][key] * 1000, "ms", r[command][key] * 1000, "bridge+host-local",
                goal=goal, goal_on="ratio"))
    figures.append(Figure(NAME, "cold first ADD", cold[kuryr.name] * 1000, "ms",
                          cold[ref.name] * 1000, "bridge+host-local"))
    return Outcome(figures, raw={"adds_s": adds, "dels_s": dels, "summary_s": stats,
                                 "cold_add_s": cold},
                   notes=[f"{count} sequential pods, each in its own netns; kuryr-cni "
                          "is the shim exec'd per call against a standalone daemon "
                          "(production defaults); calls interleaved with the reference."])
