"""Benchmark 1 — sequential CNI latency, both shims against the reference.

30 pods, one at a time: ADD each into its own netns, then DEL each, every
call through cnitool (libcni 1.1) as a runtime makes it. The three
implementations (kuryr-cni in Go, kuryr-cni in Python, bridge+host-local)
are interleaved call by call, the order rotating with each pod, so a noisy
neighbour slows all alike rather than whichever happened to run during it.
Each first does one untimed ADD+DEL (reported as "cold ADD"): the first
call pays for page-cache and lazy imports once per daemon, not once per pod.

Goal: the compiled shim's ADD median <= 1.0x the reference's (the Python
shim's figures are quoted beside it, without a goal).
"""
from __future__ import annotations

from benchmarks.context import Context, Outcome
from benchmarks.plugins import Plugin, pods
from benchmarks.stats import Figure, summarize

NAME = "cni-latency"
GOAL_ADD_RATIO = 1.0
REF = "bridge+host-local"


def rotate(items: list[Plugin], i: int) -> list[Plugin]:
    """``items`` starting at ``i % len(items)``: each goes first in turn."""
    k = i % len(items)
    return items[k:] + items[:k]


def _sequence(order: list[Plugin], work: dict[str, list[tuple[str, str]]],
              command: str, samples: dict[str, list[float]], index: int) -> None:
    for plugin in order:
        cid, netns = work[plugin.name][index]
        samples[plugin.name].append(plugin.call(command, cid, netns))


def run(ctx: Context) -> Outcome:
    count = ctx.scale(30, 5)
    shims, ref = ctx.shims(), ctx.reference()
    every = [*shims, ref]
    cold = {}
    for plugin in every:
        (cid, netns), = pods(ctx.ws.netns(1), "cold")
        cold[plugin.name] = plugin.call("ADD", cid, netns)
        plugin.call("DEL", cid, netns)
    work = {p.name: pods(ctx.ws.netns(count), "seq") for p in every}
    adds: dict[str, list[float]] = {p.name: [] for p in every}
    dels: dict[str, list[float]] = {p.name: [] for p in every}
    for i in range(count):
        _sequence(rotate(every, i), work, "ADD", adds, i)
    for i in range(count):
        _sequence(rotate(every, i), work, "DEL", dels, i)
    stats = {name: {"ADD": summarize(adds[name]), "DEL": summarize(dels[name])}
             for name in adds}
    r = stats[ref.name]
    figures = []
    for n, shim in enumerate(shims):
        k = stats[shim.name]
        for command in ("ADD", "DEL"):
            for key in ("median", "p90"):
                goal = (GOAL_ADD_RATIO if n == 0 and (command, key) == ("ADD", "median")
                        else None)
                figures.append(Figure(
                    NAME, f"{shim.name}: sequential {command} {key} (n={count})",
                    k[command][key] * 1000, "ms", r[command][key] * 1000, REF,
                    goal=goal, goal_on="ratio"))
        figures.append(Figure(NAME, f"{shim.name}: cold first ADD", cold[shim.name] * 1000,
                              "ms", cold[ref.name] * 1000, REF))
    figures.append(Figure(NAME, f"{REF}: sequential ADD median (n={count})",
                          r["ADD"]["median"] * 1000, "ms"))
    return Outcome(figures, raw={"adds_s": adds, "dels_s": dels, "summary_s": stats,
                                 "cold_add_s": cold},
                   notes=[f"{count} sequential pods, each in its own netns; every call is "
                          "cnitool (libcni 1.1) exec'ing the plugin; the shims talk to one "
                          "standalone daemon (production defaults); calls interleaved, "
                          "order rotating."])
