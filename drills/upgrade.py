"""Rolling upgrade: an earlier release under ADD/DEL traffic is stopped and
this version started on the same config and state; then the reverse.

Forward (``--from REV``, default :data:`PREVIOUS`, the last release before
the store had a schema version): REV's tree is exported with ``git
archive`` and installed in a venv of its own (``python3 -m venv`` + ``pip
install``); the short version, run by the test suite, runs the exported
tree with this interpreter and ``PYTHONPATH`` instead (the same code,
without a minute of pip). The earlier release attaches some pods, client
threads keep ADDing and DELing through the installed shim, the earlier
release is stopped with SIGTERM and, a moment later, this version is
started on the same configuration file and ``state_dir``. Invariants: no
call is answered with an error (calls made in the gap wait in the shim's
retry), every allocation the earlier release made is kept (same address,
still on the pod's interface), a second ADD of one answers 102 (it has no
recorded result to replay) and changes nothing, its DEL releases it, and
nothing is left at the end.

The shim is this version's, as the new pod installs it: the gap of an
upgrade is covered by the shim on the node, and a release whose shim did
not retry (such as :data:`PREVIOUS`) leaves its first upgrade's gap to the
kubelet's own retry.

Reverse ("an older binary on a newer store"): :data:`PREVIOUS` predates
schema versioning, so it cannot refuse a newer store. The reverse is
therefore tested with **this** binary on a store whose ``user_version`` is
one beyond what it knows (:data:`kuryr_supervisor.cni.ipam.schema.CURRENT`
+ 1), exactly as a downgrade from a future release finds it: the daemon
must exit 78 before any worker starts, its last line naming both
versions, the store's bytes untouched and no WAL created.
"""
from __future__ import annotations

import collections
import hashlib
import ipaddress
import os
import secrets
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from drills import chaos
from drills.common import (
    Report,
    Workspace,
    db_path,
    export_tree,
    integrity,
    leaked_links,
    leftover_processes,
    pod_links,
    source_env,
    stop,
    wait_ready,
)
from drills.sigterm import pod_address
from kuryr_supervisor.cni.ipam import IpamStore, schema
from tests.fixtures.daemon import Daemon

#: The release before the store's schema version and the shims' retry.
PREVIOUS = "40274a9"
GAP = 0.5                     # seconds between the old exit and the new start


class Release(Daemon):
    """A daemon run by a given interpreter (an earlier release's venv)."""

    python = sys.executable

    def start(self) -> Daemon:
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [self.python, "-m", "kuryr_supervisor.daemon",
                 "--config-file", str(self.config)],
                stdout=log, stderr=subprocess.STDOUT, env=env)
        return self


def install_release(tree: Path, venv: Path) -> str:
    """``python3 -m venv`` + ``pip install tree``; the venv's interpreter."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                   capture_output=True)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(tree)],
                         capture_output=True, text=True, check=False)
    if pip.returncode != 0:
        raise RuntimeError(f"pip install {tree} failed:\n{pip.stdout}\n{pip.stderr}")
    return str(venv / "bin" / "python")


def allocations(path: str) -> dict[str, str]:
    """container id -> address, read-only with sqlite3 (never migrating)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        rows = conn.execute("SELECT container_id, address FROM allocations").fetchall()
    finally:
        conn.close()
    return {cid: str(ipaddress.IPv4Address(addr)) for cid, addr in rows}


def describe(pids: set[int]) -> list[str]:
    """pid and command line of each process, for a failure message."""
    out = []
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().replace(b"\0", b" ").decode(errors="replace")
            out.append(f"{pid} {argv[:120]}")
        except OSError:
            out.append(str(pid))
    return out


def user_version(path: str) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run(short: bool = False, seed: int = 0, from_rev: str = PREVIOUS) -> Report:
    del seed                   # no random choice here
    pods, clients = (6, 2) if short else (30, 6)
    report = Report("upgrade")
    with Workspace("upgrade", shim="go") as ws:
        tree = ws.root / "release"
        commit = export_tree(from_rev, tree)
        workdir = ws.root / "node"
        workdir.mkdir()
        daemon = Release(workdir, {"supervisor": {"max_restarts": 100000}},
                         env=source_env(tree))
        ws.daemons.append(daemon)
        how = "exported tree on PYTHONPATH"
        if not short:
            daemon.python = install_release(tree, ws.root / "venv")
            daemon.env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            daemon.env["PYTHONSAFEPATH"] = "1"     # not this checkout from the cwd
            how = "its own venv (pip install)"
        report.figures["from"] = f"{from_rev} ({commit[:10]}), {how}"
        known = (tree / "kuryr_supervisor" / "cni" / "ipam" / "schema.py").exists()
        forward(ws, daemon, pods, clients, known, report)
        if not known:      # a release before versioning never sets it
            report.check(report.figures.get(
                "store's user_version under the earlier release") in (0, None),
                "the earlier release's store has a schema version: was it "
                "really the earlier release that ran?")
        if report.ok:
            reverse(ws, daemon, report)
        procs = leftover_processes(ws.sessions)
        report.check(not procs, f"processes left: {describe(procs)}")
    return report


def forward(ws: Workspace, daemon: Release, count: int, clients: int,
            replayable: bool, report: Report) -> None:
    """The earlier release, traffic, SIGTERM, this version, checks."""
    ws.start(daemon)
    if not report.check(wait_ready(daemon, 60), f"{daemon.python} never became "
                        f"ready:\n{daemon.log()[-2000:]}"):
        return
    conf = ws.netconf(daemon, timeout=chaos.SHIM_TIMEOUT)
    earlier = [("ksvx" + secrets.token_hex(10), ws.netns()) for _ in range(count)]
    addresses: dict[str, str] = {}
    for cid, ns in earlier:
        call = ws.shim("ADD", conf, container_id=cid, netns=ns)
        if report.check(call.status == 0, f"earlier release ADD: {call.stdout}"):
            addresses[cid] = call.answer["ips"][0]["address"]
    if not report.ok:
        return
    version = user_version(db_path(daemon))
    report.figures["store's user_version under the earlier release"] = version
    tally = chaos.Tally()
    stopping = threading.Event()
    threads = [threading.Thread(target=chaos.client, args=(ws, daemon, tally, stopping),
                                daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        old = stop(daemon, 30)
        report.check(old == 0, f"earlier release's SIGTERM exit status {old}")
        stopped = time.monotonic()
        time.sleep(GAP)
        daemon.python, daemon.env = sys.executable, None
        ws.start(daemon)
        report.check(wait_ready(daemon, 60), f"this version never became ready:\n"
                     f"{daemon.log()[-2000:]}")
        report.figures["gap s (old exit to new ready)"] = round(
            time.monotonic() - stopped, 2)
        time.sleep(1.0)
    finally:
        stopping.set()
        for thread in threads:
            thread.join(chaos.SHIM_TIMEOUT * chaos.DEL_TRIES + 60)
    judge_traffic(tally, report)
    judge_earlier(ws, daemon, conf, earlier, addresses, replayable, report)
    store = IpamStore(db_path(daemon), ipaddress.IPv4Network(
        str(daemon.options["ipam"]["subnet"])))
    left = store.list()
    store.close()        # an open reader would keep the daemon's WAL file
    links = leaked_links(str(daemon.options["binding"]["bridge"]),
                         tally.container_ids + list(addresses))
    report.check(not left, f"addresses left: {[str(a.address) for a in left]}")
    report.check(not links, f"veths left: {links}")


def judge_traffic(tally: chaos.Tally, report: Report) -> None:
    report.failures.extend(tally.problems[:20])
    report.check(not tally.errors, f"{len(tally.errors)} calls answered with an "
                 f"error, e.g. {tally.errors[:3]}")
    report.check(not tally.abandoned, f"{tally.abandoned} attachments abandoned")
    report.figures.update({
        "ADD during the upgrade": dict(tally.codes["ADD"]),
        "DEL during the upgrade": dict(tally.codes["DEL"]),
        "ADD seconds p50/p99/max": chaos._trio(tally.seconds),
        "calls the shim retried (first reason)": dict(tally.retried),
    })


def judge_earlier(ws: Workspace, daemon: Daemon, conf: dict[str, Any],
                  earlier: list[tuple[str, str]], addresses: dict[str, str],
                  replayable: bool, report: Report) -> None:
    """Kept by the new daemon, released by their DEL; a second ADD is
    replayed when the earlier release recorded a result (``replayable``),
    else answered 102; either way the pod is untouched."""
    kept = allocations(db_path(daemon))
    for cid, ns in earlier:
        address = addresses[cid]
        report.check(kept.get(cid) == address.split("/")[0]
                     and pod_address(ns) == address,
                     f"{cid}: ADDed as {address}, now store {kept.get(cid)}, "
                     f"pod {pod_address(ns)}")
    cid, ns = earlier[0]
    again = ws.shim("ADD", conf, container_id=cid, netns=ns)
    if replayable:
        answered = again.status == 0 and \
            again.answer["ips"][0]["address"] == addresses[cid]
    else:
        answered = again.status == 1 and again.code == 102
    report.check(answered and pod_address(ns) == addresses[cid],
                 f"second ADD of an earlier release's pod "
                 f"({'replay' if replayable else '102'} expected): {again.stdout}")
    outcomes: collections.Counter[str] = collections.Counter()
    for cid, ns in earlier:
        call = ws.shim("DEL", conf, container_id=cid, netns=ns)
        outcomes["ok" if call.status == 0 else f"code {call.code}"] += 1
        report.check(call.status == 0 and not pod_links(ns),
                     f"DEL {cid}: {call.stdout} {pod_links(ns)}")
    report.figures["earlier allocations kept / released by DEL"] = \
        f"{len(kept.keys() & addresses.keys())}/{outcomes['ok']} of {len(earlier)}"


def reverse(ws: Workspace, daemon: Release, report: Report) -> None:
    """This binary on a store one schema version beyond it: exit 78, intact."""
    status = stop(daemon, 30)
    report.check(status == 0, f"this version's SIGTERM exit status {status}")
    store = db_path(daemon)
    report.check(not os.path.exists(store + "-wal"),
                 "ipam.sqlite-wal left after a graceful stop")
    newer = schema.CURRENT + 1
    conn = sqlite3.connect(store)
    conn.execute(f"PRAGMA user_version = {newer}")
    conn.close()
    before = digest(store)
    entries = sorted(os.listdir(os.path.dirname(store)))
    log_size = daemon.log_path.stat().st_size
    ws.start(daemon)
    try:
        exit_status: int | None = daemon.wait_exit(60)
    except subprocess.TimeoutExpired:
        exit_status = None
    said = daemon.log_path.read_bytes()[log_size:].decode(errors="replace").strip()
    last = said.splitlines()[-1] if said else ""
    report.check(exit_status == 78, f"a newer store: exit status {exit_status}: {said[-500:]}")
    report.check(f"version {newer}" in last and f"version {schema.CURRENT}" in last,
                 f"the exit line does not name both versions: {last!r}")
    report.check(digest(store) == before, "the newer store's bytes changed")
    report.check(sorted(os.listdir(os.path.dirname(store))) == entries,
                 f"state_dir entries changed: {entries} -> "
                 f"{sorted(os.listdir(os.path.dirname(store)))}")
    report.check(integrity(store) == "ok", "the newer store is not sound")
    report.figures["this version on a store at version "
                   f"{newer}"] = f"exit {exit_status}: {last[:160]}"
