"""Benchmark 3 — probe latency idle and under a CNI burst, and throughput.

The kubelet opens a new connection per probe and sends ``Connection:
close``; :func:`~benchmarks.harness.probe_once` does the same with a raw
socket so the client's cost stays small beside the answer's. Probes must
stay fast exactly when the node is busy, so they are also sampled while the
burst of benchmark 2 runs against the same daemon (one prober process,
alternating /alive and /ready, 5 ms apart, counting only samples taken while
a burst is in flight).

Throughput: 8 client threads for a fixed time, once with HTTP/1.1
keep-alive connections (http.client, reconnecting only if the server
closes) and once with a new connection per request. Python client threads
share the GIL and the same 2 cores as the daemon, so this is a floor of what
the HealthManager can serve, not its ceiling.

Beside each sample set, the same client probes a *floor*: the standard
library's ``ThreadingHTTPServer`` (a thread per connection, like werkzeug's)
answering ``ok`` from its own process, sampled interleaved with the daemon.
It shows how much of a tail is the machine (scheduling on a busy host)
rather than the HealthManager.

Goals: p99 <= 2 ms idle, <= 10 ms under the burst (both endpoints).
"""
from __future__ import annotations

import http.client
import multiprocessing
import sys
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from typing import Any

from benchmarks.context import Context, Outcome
from benchmarks.harness import probe_once
from benchmarks.plugins import burst, pods
from benchmarks.stats import Figure, summarize

NAME = "probes"
PATHS = ("/alive", "/ready")
GOAL_IDLE_P99_MS, GOAL_BURST_P99_MS = 2.0, 10.0
THREADS = 8
FLOOR = "/floor"
FLOOR_SERVER = """
import http.server
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"ok\\n")
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def floor_port(ctx: Context) -> int:
    """Start the floor server; its port."""
    proc = ctx.ws.spawn([sys.executable, "-c", FLOOR_SERVER])
    assert proc.stdout is not None
    return int(proc.stdout.readline())


def _target(port: int, floor: int, i: int) -> tuple[str, int]:
    """The i-th probe of an interleaved sequence: /alive, floor, /ready, floor."""
    return (PATHS[i // 2 % 2], port) if i % 2 == 0 else (FLOOR, floor)


def _sequential(port: int, floor: int, count: int) -> tuple[dict[str, list[float]], int]:
    samples: dict[str, list[float]] = {p: [] for p in (*PATHS, FLOOR)}
    failures = 0
    for i in range(count * 4):
        path, target = _target(port, floor, i)
        status, elapsed, _ = probe_once(target, path)
        samples[path].append(elapsed)
        failures += status != 200
    return samples, failures


def _sampler(port: int, floor: int, busy: Event, done: Event, out: Connection) -> None:
    """Probe until ``done``; keep samples taken while ``busy``; send them back."""
    samples: dict[str, list[float]] = {p: [] for p in (*PATHS, FLOOR)}
    failures = i = 0
    while not done.is_set():
        path, target = _target(port, floor, i)
        status, elapsed, _ = probe_once(target, path)
        if busy.is_set():
            samples[path].append(elapsed)
            failures += status != 200
            i += 1
        time.sleep(0.005)
    out.send((samples, failures))


def _under_burst(ctx: Context, port: int, floor: int, rounds: int, size: int
                 ) -> tuple[dict[str, list[float]], int]:
    """Probe from a separate process (a kubelet is one: the burst's 50 spawning
    threads must not hold the prober's GIL) while bursts run."""
    kuryr = ctx.shims()[0]            # the compiled shim: what is installed
    netns = ctx.netns_pool(f"burst-{kuryr.name}", size)
    mp = multiprocessing.get_context("fork")
    busy, done = mp.Event(), mp.Event()
    receive, send = mp.Pipe(duplex=False)
    prober = mp.Process(target=_sampler, args=(port, floor, busy, done, send), daemon=True)
    prober.start()
    try:
        for i in range(rounds):
            busy.set()
            burst(kuryr, pods(netns, f"probe{i}"))
            busy.clear()
    finally:
        busy.clear()
        done.set()
        result: tuple[dict[str, list[float]], int] = (
            receive.recv() if receive.poll(10) else ({p: [] for p in (*PATHS, FLOOR)}, 0))
        prober.join(5)
        if prober.is_alive():
            prober.kill()
    return result


class _CountingConnection(http.client.HTTPConnection):
    opened = 0

    def connect(self) -> None:
        type(self).opened += 1
        super().connect()


def throughput(port: int, path: str, seconds: float, keep_alive: bool) -> tuple[float, int, int]:
    """(requests/s, failures, connections opened) over ``THREADS`` threads."""
    _CountingConnection.opened = 0
    counts, failures = [0] * THREADS, [0] * THREADS
    stop = time.perf_counter() + seconds

    def client(slot: int) -> None:
        conn = _CountingConnection("127.0.0.1", port, timeout=5)
        while time.perf_counter() < stop:
            if keep_alive:
                try:
                    conn.request("GET", path)
                    resp = conn.getresponse()
                    resp.read()
                    ok = resp.status == 200
                except (OSError, http.client.HTTPException):
                    conn.close()
                    ok = False
            else:
                ok = probe_once(port, path)[0] == 200
            counts[slot] += 1
            failures[slot] += not ok
        conn.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    opened = _CountingConnection.opened if keep_alive else sum(counts)
    return sum(counts) / elapsed, sum(failures), opened


def _pair(label: str, detail: str, s: dict[str, float], goal_ms: float | None
          ) -> list[Figure]:
    """p50 (informative) and p99 (against its budget, if any) of one sample set, in ms."""
    return [Figure(NAME, f"{label} p50 ({detail})", s["median"] * 1000, "ms"),
            Figure(NAME, f"{label} p99 ({detail})", s["p99"] * 1000, "ms",
                   goal_ms, "budget" if goal_ms else "", goal=goal_ms)]


def run(ctx: Context) -> Outcome:
    port, floor = ctx.daemon().port, floor_port(ctx)
    count, seconds = ctx.scale(1000, 50), ctx.scale(10.0, 1.0)
    figures: list[Figure] = []
    raw: dict[str, Any] = {}
    idle, failed = _sequential(port, floor, count)
    under, failed_under = _under_burst(ctx, port, floor, ctx.scale(10, 1), ctx.scale(50, 8))
    for label, sets, fails, goal in (("idle", idle, failed, GOAL_IDLE_P99_MS),
                                     ("burst", under, failed_under, GOAL_BURST_P99_MS)):
        raw[label] = {"samples_s": sets, "failures": fails}
        for path in (*PATHS, FLOOR):
            s = summarize(sets[path])
            detail = f"n={s['n']}" + ("" if path == FLOOR else f", {fails} failed in all")
            figures += _pair(f"{label} {path}", detail, s, None if path == FLOOR else goal)
    for keep_alive in (True, False):
        rate, failures, opened = throughput(port, "/alive", seconds, keep_alive)
        how = "keep-alive" if keep_alive else "new connection each"
        raw[f"throughput_{how}"] = {"rps": rate, "failures": failures, "opened": opened}
        figures.append(Figure(NAME, f"/alive throughput, {THREADS} threads, {how} "
                                    f"({seconds:g}s, {failures} failed, {opened} conns)",
                              rate, "req/s"))
    return Outcome(figures, raw=raw, notes=[
        "probes: a new connection per probe with 'Connection: close' (kubelet-style), "
        "/alive, /floor, /ready, /floor interleaved; 'burst' samples taken while 10 rounds of 50 "
        "parallel ADDs then DELs run through the shim; /floor is a stdlib "
        "ThreadingHTTPServer in its own process (the machine's floor, no goal); "
        "throughput: Python client threads on the same cores as the daemon; the daemon "
        "answers 'Connection: close' even to keep-alive requests (conns = requests)."])
