"""SIGTERM with 20 ADDs in flight: each completes or rolls back, and the
daemon exits 0 within ``[supervisor] graceful_shutdown_timeout``.

Two rounds, because "in flight" has two shapes:

- *held*: the drill holds the 20 containers' locks (flock on the Server's
  own lock files), so all 20 ADDs are accepted and waiting inside the
  Server when SIGTERM lands; the locks are let go a second later and every
  ADD must then finish -- draining means in-flight work completes;
- *burst*: 20 shims start at once and SIGTERM lands at a random moment, so
  some ADDs are mid-plumb, some queued, some refused at the socket.

Why it matters: a rolling update SIGTERMs the daemon while the kubelet is
starting pods; a half-done ADD that is neither finished nor rolled back
leaks an address or a veth, or leaves a pod with an interface the runtime
thinks failed. Afterwards the daemon is started again on the same state,
every pod is deleted and the store must end empty and sound.
"""
from __future__ import annotations

import collections
import concurrent.futures
import fcntl
import ipaddress
import os
import random
import secrets
import time
from typing import Any

from drills.common import (
    Report,
    ShimCall,
    Workspace,
    db_path,
    host_ends,
    integrity,
    ip_json,
    leaked_links,
    pod_links,
    stop,
    wait_ready,
)
from kuryr_supervisor.cni.ipam import IpamStore
from tests.fixtures.daemon import Daemon, session_pids, wait_until

PODS = 20
GRACE = 10                 # [supervisor] graceful_shutdown_timeout


def hold_locks(daemon: Daemon, cids: list[str]) -> list[int]:
    """Take the Server's per-container locks, as another operation would."""
    locks = os.path.join(str(daemon.options["ipam"]["state_dir"]), "locks")
    os.makedirs(locks, mode=0o700, exist_ok=True)
    fds = []
    for cid in cids:
        fd = os.open(os.path.join(locks, f"{cid}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        fds.append(fd)
    return fds


def pod_address(netns: str) -> str | None:
    for entry in ip_json("-n", os.path.basename(netns), "addr", "show", "eth0"):
        for info in entry.get("addr_info", []):
            if info.get("family") == "inet":
                return f"{info['local']}/{info['prefixlen']}"
    return None


def one_round(ws: Workspace, daemon: Daemon, pods: list[tuple[str, str]],
              held: bool, rng: random.Random, report: Report) -> dict[str, Any]:
    tag = "held" if held else "burst"
    conf = ws.netconf(daemon, timeout=30.0)
    fds = hold_locks(daemon, [cid for cid, _ in pods]) if held else []
    pool = concurrent.futures.ThreadPoolExecutor(PODS)
    try:
        futures = [pool.submit(ws.shim, "ADD", conf, container_id=cid, netns=ns,
                               limit=60) for cid, ns in pods]
        if held:
            ok = _wait(lambda: daemon.status()["server"]["inflight"] >= PODS, 15)
            report.check(ok, f"{tag}: the {PODS} ADDs never were all in flight")
        else:                      # as soon as the first ADDs arrive
            _wait(lambda: daemon.status()["server"]["inflight"] >= 1, 10)
            time.sleep(rng.uniform(0.0, 0.05))
        inflight = daemon.status()["server"]["inflight"]
        master = daemon.pid
        signalled = time.monotonic()
        daemon.signal(15)
        report.check(_wait(lambda: daemon.probe("/ready") != 200, 2.0),
                     f"{tag}: /ready still 200 after SIGTERM")
        if held:
            time.sleep(1.0)
        for fd in fds:
            os.close(fd)
        fds = []
        # The exit is timed on its own: a shim that came too late for this
        # daemon keeps retrying until its deadline (then code 11, nothing
        # made), which is the shim's time, not the drain's.
        try:
            exit_status: int | None = daemon.wait_exit(GRACE + 10)
        except Exception:  # noqa: BLE001 - reported below
            exit_status = None
        took = time.monotonic() - signalled
        calls: list[ShimCall] = [f.result() for f in futures]
    finally:
        for fd in fds:
            os.close(fd)
        pool.shutdown(wait=True)
    report.check(exit_status == 0, f"{tag}: exit status {exit_status}")
    report.check(took <= GRACE, f"{tag}: exit took {took:.1f} s (grace {GRACE} s)")
    report.check(not session_pids(master), f"{tag}: processes left after exit")
    outcomes = judge_calls(tag, daemon, pods, calls, report)
    return {"in flight at SIGTERM": inflight, "exit": exit_status,
            "exit s": round(took, 2), "ADDs": dict(outcomes)}


def judge_calls(tag: str, daemon: Daemon, pods: list[tuple[str, str]],
                calls: list[ShimCall], report: Report) -> collections.Counter[str]:
    """Success: allocated and plumbed as answered. Error: nothing left."""
    store = IpamStore(db_path(daemon), ipaddress.IPv4Network(
        str(daemon.options["ipam"]["subnet"])))
    outcomes: collections.Counter[str] = collections.Counter()
    for (cid, ns), call in zip(pods, calls, strict=True):
        alloc = store.get(cid, "eth0")
        problem = call.problem()
        if problem:
            report.failures.append(f"{tag} ADD {cid}: {problem}")
        if call.status == 0:
            outcomes["ok"] += 1
            answered = call.answer["ips"][0]["address"]
            report.check(alloc is not None and str(alloc.address) == answered
                         and pod_address(ns) == answered,
                         f"{tag} ADD {cid} succeeded as {answered} but store has "
                         f"{alloc and alloc.address}, pod has {pod_address(ns)}")
        else:
            outcomes[f"code {call.code}"] += 1
            left = host_ends([cid])
            report.check(alloc is None and not pod_links(ns) and not left,
                         f"{tag} ADD {cid} failed ({call.stdout.strip()}) but left "
                         f"{alloc and alloc.address} {pod_links(ns)} {left}")
    store.close()
    return outcomes


def clean_up(ws: Workspace, daemon: Daemon, pods: list[tuple[str, str]],
             report: Report) -> None:
    """Start again on the same state, DEL every pod, expect nothing left."""
    ws.start(daemon)
    if not report.check(wait_ready(daemon), "daemon not ready after restart"):
        return
    conf = ws.netconf(daemon)
    for cid, ns in pods:
        call = ws.shim("DEL", conf, container_id=cid, netns=ns)
        report.check(call.status == 0, f"DEL {cid}: {call.stdout!r}")
    store = IpamStore(db_path(daemon), ipaddress.IPv4Network(
        str(daemon.options["ipam"]["subnet"])))
    left = store.list()
    store.close()
    report.check(not left, f"addresses left after DEL: {left}")
    links = leaked_links(str(daemon.options["binding"]["bridge"]),
                         [cid for cid, _ in pods])
    report.check(not links, f"veths left after DEL: {links}")


def _wait(predicate: Any, timeout: float) -> bool:
    try:
        wait_until(predicate, timeout, interval=0.02)
        return True
    except (TimeoutError, OSError, AssertionError):
        return False


def run(short: bool = False, seed: int = 0) -> Report:
    rng = random.Random(seed)
    rounds = ["held", "burst"] if short else ["held", "burst"] * 5
    report = Report("sigterm")
    with Workspace("sigterm") as ws:
        daemon = ws.daemon({"supervisor": {"graceful_shutdown_timeout": GRACE}})
        namespaces = [ws.netns() for _ in range(PODS)]
        for n, kind in enumerate(rounds):
            ws.start(daemon)
            if not report.check(wait_ready(daemon), "daemon never became ready"):
                break
            pods = [("ksvx" + secrets.token_hex(10), ns) for ns in namespaces]
            figures = one_round(ws, daemon, pods, kind == "held", rng, report)
            report.figures[f"round {n + 1} ({kind})"] = figures
            clean_up(ws, daemon, pods, report)
            exit_status = stop(daemon)
            report.check(exit_status == 0, f"exit status {exit_status} after clean-up")
            if not report.ok:
                break
        verdict = integrity(db_path(daemon)) if os.path.exists(db_path(daemon)) \
            else "no store"
        report.figures["sqlite integrity_check"] = verdict
        report.check(verdict == "ok", f"allocation store: {verdict}\n{daemon.log()}")
    return report
