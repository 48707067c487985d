"""Benchmark 6 — start-up: exec of the daemon to the first ``/ready`` 200.

The time a node waits after (re)starting the daemon before pods can be
plumbed: the kubelet keeps the node NotReady until then, and every restart
by systemd or Kubernetes pays it again. Standalone, production defaults,
a fresh config, socket, state directory and bridge each time; polled with
kubelet-style probes every 10 ms. The daemon is stopped with SIGINT
between runs. Median of 5.

Goal: <= 1 s.
"""
from __future__ import annotations

import statistics
import time

from benchmarks.context import Context, Outcome
from benchmarks.harness import probe_once
from benchmarks.stats import Figure

NAME = "startup"
GOAL_S = 1.0
TIMEOUT = 30.0


def once(ctx: Context) -> dict[str, float]:
    """Seconds from exec to the first answer, /startup 200 and /ready 200."""
    daemon = ctx.ws.daemon(start=False)
    started = daemon.start()
    marks: dict[str, float] = {}
    try:
        while "ready" not in marks:
            now = time.perf_counter() - started
            if now > TIMEOUT:
                raise RuntimeError(f"not ready after {TIMEOUT}s:\n{daemon.log()}")
            status = probe_once(daemon.port, "/ready", timeout=0.5)[0]
            at = time.perf_counter() - started
            if status:
                marks.setdefault("first answer", at)
            if status == 200:
                marks["ready"] = at
            time.sleep(0.01)
    finally:
        daemon.close()
    return marks


def run(ctx: Context) -> Outcome:
    count = ctx.scale(5, 2)
    runs = [once(ctx) for _ in range(count)]
    ready = statistics.median(r["ready"] for r in runs)
    first = statistics.median(r.get("first answer", float("nan")) for r in runs)
    return Outcome(
        [Figure(NAME, f"exec -> /ready 200 (median of {count})", ready, "s",
                GOAL_S, "budget", goal=GOAL_S),
         Figure(NAME, "exec -> first probe answer", first, "s")],
        raw={"runs_s": runs},
        notes=["start-up: standalone daemon, production defaults, fresh state each run."])
