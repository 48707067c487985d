"""Chaos: SIGKILL workers (and sometimes the master) under CNI traffic.

Eight client threads (four in the short version) act like a container
runtime running the compiled shim (``--shim python`` for the Python one),
each in its own network namespace: ADD a fresh container, then DEL it (also after a failed ADD, as
runtimes do), retrying a failed DEL a few times before giving the attachment
up and moving to a fresh namespace. Meanwhile the main thread SIGKILLs a
random worker, or the master (then starts the daemon again on the same
config and state directory), and waits for the daemon to be alive again.

Why these invariants: a runtime only ever sees the shim, and a kill is a
heal, not an outage: **every call succeeds** (a connection that arrives
while the Server or the whole daemon is down waits in the master's backlog
or in the shim's retry; a request a killed Server had accepted is sent
again and replayed, or its half-done attachment rolled back and redone),
so no attachment is abandoned; and since any process may die at any
instant, one final GC (the runtime saying "no attachment is valid any
more") must leave no address, no veth, no lock holder and no process
behind, with the SQLite store intact. ADD latency during the kills is
reported (goal: p99 <= 1 s), and how many calls the shim had to retry,
by reason.

``--source DIR`` runs the daemon and the shim of another tree (an earlier
release exported with ``git archive``), measured the same way: that is
how the figures before a change are taken.
"""
from __future__ import annotations

import collections
import dataclasses
import ipaddress
import os
import random
import re
import secrets
import signal
import threading
import time
from pathlib import Path
from typing import Any

from drills.common import (
    Report,
    ShimCall,
    Workspace,
    db_path,
    integrity,
    leaked_links,
    leftover_processes,
    percentile,
    pod_links,
    stop,
)
from kuryr_supervisor.cni.ipam import IpamStore
from tests.fixtures.daemon import Daemon, session_pids, wait_until

WORKERS = ("watcher", "server", "health")
SHIM_TIMEOUT = 10.0          # netconf "timeout" of every call
SLACK = 3.0                  # Python start-up of the shim, scheduling
DEL_TRIES = 3
#: The shims' one stderr line when they start waiting for the daemon.
RETRY_LINE = re.compile(r"is not there \(([^)]*)\); retrying")


@dataclasses.dataclass
class Tally:
    """Outcomes of the clients' calls (shared by the client threads)."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    codes: dict[str, collections.Counter[str]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(collections.Counter))
    seconds: list[float] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)
    container_ids: list[str] = dataclasses.field(default_factory=list)
    abandoned: int = 0
    #: calls the shim had to send again, by the first reason it logged
    retried: collections.Counter[str] = dataclasses.field(
        default_factory=collections.Counter)
    errors: list[str] = dataclasses.field(default_factory=list)

    def record(self, command: str, call: ShimCall) -> None:
        with self.lock:
            outcome = "ok" if call.status == 0 else f"code {call.code}"
            self.codes[command][outcome] += 1
            if command == "ADD":
                self.seconds.append(call.seconds)
            waited = RETRY_LINE.search(call.stderr)
            if waited:
                self.retried[waited.group(1)] += 1
            if call.status != 0:
                self.errors.append(f"{command}: {call.stdout.strip()[:300]}")
            problem = call.problem()
            if call.seconds > SHIM_TIMEOUT + SLACK:
                problem = f"took {call.seconds:.1f} s (timeout {SHIM_TIMEOUT} s)"
            if problem:
                self.problems.append(f"{command}: {problem}")


def client(ws: Workspace, daemon: Daemon, tally: Tally,
           stopping: threading.Event) -> None:
    """ADD then DEL until told to stop, like a runtime starting pods."""
    netns = ws.netns()
    conf = ws.netconf(daemon, timeout=SHIM_TIMEOUT)
    limit = SHIM_TIMEOUT + 30
    while not stopping.is_set():
        cid = "ksvx" + secrets.token_hex(10)
        with tally.lock:
            tally.container_ids.append(cid)
        tally.record("ADD", ws.shim("ADD", conf, container_id=cid,
                                    netns=netns, limit=limit))
        for attempt in range(DEL_TRIES):
            call = ws.shim("DEL", conf, container_id=cid, netns=netns,
                           limit=limit)
            tally.record("DEL", call)
            if call.status == 0:
                break
            time.sleep(0.3 * (attempt + 1))
        else:
            with tally.lock:
                tally.abandoned += 1       # GC's job now
            netns = ws.netns()


def alive_again(daemon: Daemon, name: str, old: int) -> bool:
    try:
        pid = daemon.worker_pids()[name]
        return pid not in (old, 0) and daemon.probe("/alive") == 200
    except (OSError, AssertionError, KeyError, ValueError):
        return False


def kill_one(ws: Workspace, daemon: Daemon, target: str, report: Report) -> float:
    """SIGKILL ``target``; seconds until the daemon is alive again."""
    start = time.monotonic()
    if target == "master":
        workers = set(daemon.worker_pids().values())
        old_session = daemon.pid
        daemon.signal(signal.SIGKILL)
        daemon.wait_exit(5)
        try:
            wait_until(lambda: not session_pids(old_session) & workers, 3.0)
        except TimeoutError:
            report.failures.append(f"workers {workers} outlived the master")
        ws.start(daemon)
        ok = _wait(lambda: daemon.probe("/alive") == 200
                   and daemon.probe("/ready") == 200, 30)
    else:
        old = daemon.worker_pids()[target]
        os.kill(old, signal.SIGKILL)
        ok = _wait(lambda: alive_again(daemon, target, old), 30)
    report.check(ok, f"not alive 30 s after killing {target}:\n{daemon.log()[-1500:]}")
    return time.monotonic() - start


def _wait(predicate: Any, timeout: float) -> bool:
    try:
        wait_until(predicate, timeout, interval=0.05)
        return True
    except TimeoutError:
        return False


def run(short: bool = False, seed: int = 0, shim: str = "go",
        source: Path | None = None) -> Report:
    kills = 20 if short else 200
    clients = 4 if short else 8
    rng = random.Random(seed)
    report = Report("chaos")
    tally = Tally()
    started = time.monotonic()
    with Workspace("chaos", source=source, shim=shim) as ws:
        daemon = ws.daemon()
        ws.start(daemon)
        if not report.check(_wait(lambda: daemon.probe("/ready") == 200, 30),
                            "daemon never became ready"):
            return report
        stopping = threading.Event()
        threads = [threading.Thread(target=client, args=(ws, daemon, tally, stopping),
                                    daemon=True) for _ in range(clients)]
        for thread in threads:
            thread.start()
        targets: collections.Counter[str] = collections.Counter()
        recovery: dict[str, list[float]] = collections.defaultdict(list)
        try:
            for n in range(kills):
                time.sleep(rng.uniform(0.1, 0.6))
                master = (n % 5 == 3) if short else rng.random() < 0.1
                target = "master" if master else rng.choice(WORKERS)
                targets[target] += 1
                recovery["master" if master else "worker"].append(
                    kill_one(ws, daemon, target, report))
                if len(report.failures) > 5:
                    break
        finally:
            stopping.set()
            for thread in threads:
                thread.join(SHIM_TIMEOUT * DEL_TRIES + 60)
        traffic_s = time.monotonic() - started
        final_checks(ws, daemon, tally, report)
    report.failures.extend(tally.problems[:50])
    report.check(not tally.errors, f"{len(tally.errors)} calls answered with an "
                 f"error, e.g. {tally.errors[:3]}")
    report.check(not tally.abandoned,
                 f"{tally.abandoned} attachments abandoned (DEL failed {DEL_TRIES} times)")
    adds = tally.codes["ADD"]
    report.figures.update({
        "code": f"{source or 'this checkout'}, {shim} shim, {clients} clients",
        "kills": f"{sum(targets.values())} ({dict(targets)})",
        "ADD": f"{sum(adds.values())} ({dict(adds)})",
        "DEL": f"{sum(tally.codes['DEL'].values())} ({dict(tally.codes['DEL'])})",
        "attachments abandoned to GC": tally.abandoned,
        "ADD seconds p50/p99/max": _trio(tally.seconds),
        "worker recovery s p50/max": _duo(recovery["worker"]),
        "master restart s p50/max": _duo(recovery["master"]),
        "calls over timeout or not CNI": len(tally.problems),
        "calls answered with an error": len(tally.errors),
        "calls the shim retried (first reason)": dict(tally.retried),
        "traffic duration s": round(traffic_s, 1),
        "total duration s": round(time.monotonic() - started, 1),
    })
    return report


def final_checks(ws: Workspace, daemon: Daemon, tally: Tally,
                 report: Report) -> None:
    """GC with no valid attachment, then look for anything left."""
    report.check(_wait(lambda: daemon.probe("/ready") == 200, 30),
                 "daemon not ready after the kills")
    conf = dict(ws.netconf(daemon), **{"cni.dev/valid-attachments": []})
    gc = ws.shim("GC", conf, limit=60)
    report.check(gc.status == 0, f"final GC failed: {gc.stdout} {gc.stderr}")
    status = daemon.status()
    report.figures["cni failures counted"] = status.get("cniFailures")
    report.figures["restarts"] = {name: c["restarts"]
                                  for name, c in status["components"].items()}
    subnet = str(daemon.options["ipam"]["subnet"])
    left = IpamStore(db_path(daemon), ipaddress.IPv4Network(subnet)).list()
    links = leaked_links(str(daemon.options["binding"]["bridge"]),
                         tally.container_ids)
    pods = {ns: pod_links(ns) for ns in ws.namespaces}
    pods = {ns: names for ns, names in pods.items() if names}
    locks = os.listdir(os.path.join(str(daemon.options["ipam"]["state_dir"]),
                                    "locks"))
    exit_status = stop(daemon)
    verdict = integrity(db_path(daemon))
    procs = leftover_processes(ws.sessions)
    ws.close()
    netns_left = [n for n in ws.namespaces
                  if os.path.exists(f"/var/run/netns/{n}")]
    report.check(not left, f"leaked addresses: {[str(a.address) for a in left]}")
    report.check(not links, f"leaked veths: {links}")
    report.check(not pods, f"interfaces left in pod namespaces: {pods}")
    report.check(exit_status == 0, f"daemon exit status {exit_status}")
    report.check(verdict == "ok", f"integrity_check: {verdict}")
    report.check(not procs, f"processes left: {procs}")
    report.check(not netns_left, f"namespaces left: {netns_left}")
    report.figures.update({
        "leaks (addresses/veths/pod ifs/netns/processes)":
            f"{len(left)}/{len(links)}/{len(pods)}/{len(netns_left)}/{len(procs)}",
        "stale lock files": len(locks),
        "sqlite integrity_check": verdict,
        "SIGTERM exit status": exit_status,
    })


def _trio(values: list[float]) -> str:
    return "/".join(f"{percentile(values, p):.2f}" for p in (50, 99, 100))


def _duo(values: list[float]) -> str:
    return "/".join(f"{percentile(values, p):.2f}" for p in (50, 100))
