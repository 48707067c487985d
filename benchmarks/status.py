"""Benchmark — CNI STATUS latency, idle and while 50 ADDs run in parallel.

A runtime that speaks CNI 1.1 (libcni 1.2's ``GetStatusNetworkList``, as
containerd 2 calls it from CRI's Status) execs the plugin with
``CNI_COMMAND=STATUS`` and the plugin's configuration on stdin every few
seconds, and a slow answer makes the node NotReady. Here a process of its
own does the same with the compiled shim (``kuryr-cni (go)``, cniVersion 1.1.0),
one STATUS after another, against the shared daemon (production defaults):

* reference: STATUS with nothing else running (same run, same daemon);
* under load: STATUS while a burst of 50 ADDs (cnitool, one process per
  pod, as in the ``burst`` benchmark) runs, counting only the calls that
  started and ended inside the burst; a few bursts, their pods deleted
  in between.

STATUS is answered from shared memory (the draining flag, what the
HealthManager published from its checks, the environment faults, the
store's state): it must not queue behind the ADDs. The same process also
sends the shim's request over the socket without exec'ing anything, and
execs ``/bin/true`` (the floor), so the daemon's part of the time is told
from what any process start costs on a saturated machine. Goal: p99 <= 50 ms under load (the shim exec'd, as a runtime
sees it).
"""
from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import subprocess
import time
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path

from benchmarks.context import Context, Outcome
from benchmarks.plugins import HOST_PATH, pods
from benchmarks.stats import Figure, summarize
from kuryr_supervisor.cni import shim as shim_client

NAME = "status"
GOAL_P99_MS = 50.0
FLOOR = "/bin/true"


def _netconf(socket: str) -> str:
    return json.dumps({"cniVersion": "1.1.0", "name": "kuryr",
                       "type": "kuryr-cni", "daemon_socket": socket})


def status_once(shim: Path, netconf: str) -> float:
    """One STATUS as a runtime execs it; its wall time; raise if it fails."""
    env = {"PATH": HOST_PATH, "CNI_COMMAND": "STATUS",
           "CNI_PATH": str(shim.parent)}
    start = time.perf_counter()
    done = subprocess.run([str(shim)], input=netconf, env=env, text=True,
                          capture_output=True, timeout=30, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"STATUS failed: {done.stdout} {done.stderr}")
    return elapsed


def answer_once(socket: str, netconf: str) -> float:
    """The daemon's part alone: the request the shim sends, over the
    socket, no process exec'd; its wall time."""
    data = json.dumps({"env": {"CNI_COMMAND": "STATUS", "CNI_PATH": "/"},
                       "config": json.loads(netconf)}).encode()
    start = time.perf_counter()
    status, body = shim_client.call_daemon(socket, data, 30.0, {},
                                           command="STATUS")
    elapsed = time.perf_counter() - start
    if status != 204:
        raise RuntimeError(f"STATUS answered {status}: {body[:200]!r}")
    return elapsed


def floor_once() -> float:
    """A process that does nothing, exec'd the same way: what the machine
    alone costs a call."""
    start = time.perf_counter()
    subprocess.run([FLOOR], env={"PATH": HOST_PATH}, capture_output=True,
                   timeout=30, check=True)
    return time.perf_counter() - start


#: (kind, what the table calls it)
KINDS = (("exec", "STATUS (shim exec'd)"),
         ("answer", "STATUS answer (socket, no exec)"),
         ("floor", f"{FLOOR} exec'd (the machine's floor)"))


def _sampler(shim: Path, socket: str, netconf: str, done: Event,
             out: Connection) -> None:
    """Call until ``done``: STATUS through the shim exec'd, the daemon's
    answer alone, the floor, in turn; send back (start, wall time) of each
    call by kind."""
    calls: dict[str, list[tuple[float, float]]] = {k: [] for k, _ in KINDS}
    kinds = {"exec": lambda: status_once(shim, netconf),
             "answer": lambda: answer_once(socket, netconf),
             "floor": floor_once}
    while not done.is_set():
        for kind, call in kinds.items():
            began = time.perf_counter()
            calls[kind].append((began, call()))
    out.send(calls)


class Poller:
    """The calls from a process of its own (a runtime is one: the burst's
    50 spawning threads must not hold the sampler's GIL)."""

    def __init__(self, shim: Path, socket: str, netconf: str) -> None:
        mp = multiprocessing.get_context("fork")
        self._done = mp.Event()
        self._receive, send = mp.Pipe(duplex=False)
        self._process = mp.Process(target=_sampler, daemon=True, args=(
            shim, socket, netconf, self._done, send))
        self.calls: dict[str, list[tuple[float, float]]] = {}

    def __enter__(self) -> Poller:
        self._process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._receive.poll(30):
            self.calls = self._receive.recv()
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()
        if not self.calls:
            raise RuntimeError("the STATUS sampler sent nothing back")

    def within(self, kind: str, start: float, end: float) -> list[float]:
        """Wall times of the calls of ``kind`` made between ``start`` and
        ``end`` (perf_counter: CLOCK_MONOTONIC, the same in every process)."""
        return [took for began, took in self.calls[kind]
                if began >= start and began + took <= end]


def run(ctx: Context) -> Outcome:
    go = ctx.shims()[0]
    shim = Path(go.cni_path) / "kuryr-cni"
    socket = f"unix://{ctx.daemon().socket_path}"
    netconf = _netconf(socket)
    with Poller(shim, socket, netconf) as idle_poller:
        time.sleep(ctx.scale(10.0, 1.0))
    idle = {kind: idle_poller.within(kind, 0.0, float("inf"))
            for kind, _ in KINDS}
    size, rounds = ctx.scale(50, 8), ctx.scale(20, 1)
    loaded: dict[str, list[float]] = {kind: [] for kind, _ in KINDS}
    walls: list[float] = []
    with concurrent.futures.ThreadPoolExecutor(size) as pool, \
            Poller(shim, socket, netconf) as poller:
        bursts: list[tuple[float, float]] = []
        for i in range(rounds):
            work = pods(ctx.netns_pool("status-burst", size), f"st{i}")
            start = time.perf_counter()
            adds = [pool.submit(go.call, "ADD", cid, ns) for cid, ns in work]
            failed = [f.exception() for f in adds if f.exception()]
            end = time.perf_counter()
            bursts.append((start, end))
            walls.append(end - start)
            for f in [pool.submit(go.call, "DEL", cid, ns) for cid, ns in work]:
                f.result()
            if failed:
                raise RuntimeError(f"{len(failed)} ADDs failed: {failed[0]}")
    for start, end in bursts:
        for kind in loaded:
            loaded[kind] += poller.within(kind, start, end)
    if not all(loaded.values()):
        raise RuntimeError("no STATUS call fell inside a burst")
    figures = []
    for kind, what in KINDS:
        i, busy = summarize(idle[kind]), summarize(loaded[kind])
        n = len(loaded[kind])
        figures += [
            Figure(NAME, f"{what} p50 during {size} parallel ADDs (n={n})",
                   busy["median"] * 1000, "ms", i["median"] * 1000,
                   f"idle p50 (n={len(idle[kind])})"),
            Figure(NAME, f"{what} p99 during {size} parallel ADDs (n={n})",
                   busy["p99"] * 1000, "ms", i["p99"] * 1000,
                   f"idle p99 (n={len(idle[kind])})",
                   goal=GOAL_P99_MS if kind == "exec" else None)]
    return Outcome(figures, raw={"idle_s": idle, "loaded_s": loaded,
                                 "burst_walls_s": walls},
                   notes=[f"STATUS one call after another: the compiled shim "
                          f"exec'd (cniVersion 1.1.0) as a runtime does, then "
                          f"the same request over the socket without a "
                          f"process, then {FLOOR} exec'd (the floor: what a "
                          f"process costs on this machine then); under load "
                          f"only calls inside a burst of "
                          f"{size} cnitool ADDs count ({rounds} bursts, pods "
                          "deleted between); the reference is the same calls "
                          "with nothing else running (same daemon, same run)."])
