"""Benchmark 7 — fleet relist: 200 Watchers, the API server down for 30 s.

At fleet scale the API server is shared: after an outage every node's
Watcher comes back, finds its resourceVersion expired (the restarted API
server's watch cache starts afresh, 410 Gone) and relists. What matters to
the API server is how many relists arrive at once, and how many are
consistent reads that go to etcd rather than the watch cache.

200 real :class:`Informer` loops (threads, each with its own real
``K8sClient`` over HTTP) watch their own node's pods on the fake API
(``tests/fixtures/fakeapi.py``). Once all are synced the API answers 503 for
30 s (open watches dropped), forgets its history (a restarted API server),
then serves again. Reported from the API's request log, for the code as it
was ("before": fixed backoff, immediate relist, consistent lists) and as it
is ("after": jittered backoff, cache-served relists), in the same run:
relist peak per 1 s and per 100 ms, the spread of the relists, when the last
node was back, and the share of relists that were consistent reads.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterable
from typing import Any

from benchmarks.context import Context, Outcome
from benchmarks.stats import Figure, percentile
from kuryr_supervisor.kubernetes.informer import Informer
from kuryr_supervisor.kubernetes.registry import Pod
from tests.fixtures.fakeapi import FakeAPI

NAME = "fleet"


class Before:
    """The old schedule, exactly: the full exponential delay, and 0 s before
    a relist after 410 (every draw at the end of its range that was used)."""

    def uniform(self, low: float, high: float) -> float:
        return high if low > 0 else low


class NullSink:
    def replace_all(self, pods: Iterable[Pod], resource_version: str) -> None:
        list(pods)

    def upsert(self, pod: Pod) -> None:
        pass

    def delete(self, pod: Pod) -> None:
        pass


def peak(times: list[float], window: float) -> int:
    """Most events inside any window of ``window`` seconds."""
    best, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] > window:
            start += 1
        best = max(best, end - start + 1)
    return best


def simulate(mode: str, watchers: int, outage: float) -> dict[str, Any]:
    api = FakeAPI()
    api.server.handle_error = lambda request, address: None  # type: ignore[method-assign]
    api.start()
    # 200 loops logging each outage transition would drown the report.
    logging.getLogger("kuryr_supervisor.kubernetes").setLevel(logging.ERROR)
    stop = threading.Event()
    loops: list[Informer[Pod]] = []
    threads = []
    try:
        for i in range(watchers):
            api.add_node(f"node-{i}")
            api.add_pod("ns", f"pod-{i}", f"node-{i}")
        for i in range(watchers):
            client = api.client(f"node-{i}", watch_timeout=300,
                                request_timeout=5)
            loop = Informer(
                client.node_pods, NullSink(), heartbeat_interval=1.0,
                backoff_initial=0.5, backoff_max=30.0,
                rng=Before() if mode == "before" else random.Random(i),  # type: ignore[arg-type]
                cache_relist=mode == "after")
            loops.append(loop)
            thread = threading.Thread(target=loop.run, args=(stop,),
                                      name=f"watcher-{i}", daemon=True)
            threads.append(thread)
            thread.start()
        deadline = time.monotonic() + 120
        while not all(loop.synced for loop in loops):
            if time.monotonic() > deadline:
                raise RuntimeError("watchers did not sync")
            time.sleep(0.1)
        time.sleep(1.0)                    # every watch open
        api.fail(503)
        time.sleep(outage)
        api.add_pod("other", "churn", "elsewhere")   # the cluster moved on
        api.compact()                      # a restarted API server's cache
        api.fail(None)
        up = time.monotonic()

        def lists() -> list[tuple[float, dict[str, str]]]:
            return [(t - up, q) for t, m, p, q in list(api.requests)
                    if p == "/api/v1/pods" and q.get("watch") != "true"
                    and t >= up]
        deadline = up + 120
        while len(lists()) < watchers and time.monotonic() < deadline:
            time.sleep(0.2)
        relists = lists()
        during = [t for t, m, p, q in list(api.requests)
                  if up - outage <= t < up]
    finally:
        stop.set()
        api.stop()
        for thread in threads:
            thread.join(5)
    times = sorted(t for t, _ in relists)
    if len(times) < watchers:
        raise RuntimeError(f"{mode}: only {len(times)} of {watchers} relisted")
    consistent = sum(1 for _, q in relists if "resourceVersion" not in q)
    return {
        "relists": len(times),
        "peak_1s": peak(times, 1.0), "peak_100ms": peak(times, 0.1),
        "spread_s": times[-1] - times[0], "last_s": times[-1],
        "p50_s": percentile(times, 50), "p90_s": percentile(times, 90),
        "consistent": consistent,
        "requests_during_outage": len(during),
        "times_s": [round(t, 4) for t in times],
    }


def run(ctx: Context) -> Outcome:
    watchers = ctx.scale(200, 20)
    outage = ctx.scale(30.0, 3.0)
    before = simulate("before", watchers, outage)
    after = simulate("after", watchers, outage)
    b, a = before, after
    figures = [
        Figure(NAME, f"relist peak in 1 s ({watchers} watchers)",
               a["peak_1s"], "lists", b["peak_1s"], "before"),
        Figure(NAME, "relist peak in 100 ms", a["peak_100ms"], "lists",
               b["peak_100ms"], "before"),
        Figure(NAME, "relist spread (first to last)", a["spread_s"], "s",
               b["spread_s"], "before"),
        Figure(NAME, "last node relisted after API back", a["last_s"], "s",
               b["last_s"], "before"),
        Figure(NAME, "relists read from etcd (consistent)", a["consistent"],
               "lists", b["consistent"], "before"),
        Figure(NAME, f"requests during the {outage:g} s outage",
               a["requests_during_outage"], "requests",
               b["requests_during_outage"], "before"),
    ]
    return Outcome(figures, raw={"before": before, "after": after},
                   notes=[f"fleet: {watchers} Informer loops, API down "
                          f"{outage:g} s then history compacted; before = "
                          "fixed backoff, immediate consistent relist; after "
                          "= jittered backoff, cache relist."])
