"""Slowloris: a hostile local user floods the probe port; probes stay fast.

Attackers (``drills.slowclients``, separate processes running as uid 65534)
hold 10,000 slowloris connections (headers a byte at a time, never
finished) and 2,000 idle keep-alive connections against the HealthManager's
probe port, reconnecting whatever the server closes. Meanwhile the drill
probes ``/alive`` and ``/ready`` as the kubelet would (a new connection per
probe, 1 s timeout).

Why it matters: with a thread per connection and no header deadline, a few
thousand such connections made ``/alive`` slow, then refused, starved the
HealthManager's heartbeat until the master killed it as stale, and every
round cost one restart: the kubelet would restart a healthy daemon.

Invariants: ``/alive`` and ``/ready`` p99 under 1 s during the attack
(a probe that fails counts as 1 s) and never ``FAILURE_THRESHOLD`` failed
probes in a row on one path (what would make the kubelet act); no worker restarted; the HealthManager's RSS grows by less than
10 MiB during the attack and is back within 2 MiB of idle after it.
The reference in the same run: the probe latency before the attack.
"""
from __future__ import annotations

import collections
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from drills.common import Report, Workspace, percentile, stop, wait_ready
from tests.fixtures.daemon import Daemon

P99_LIMIT = 1.0
#: the kubelet's default failureThreshold: this many failed probes in a row
#: restart (liveness) or unready (readiness) the pod
FAILURE_THRESHOLD = 3
RSS_GROWTH_LIMIT = 10 * 1024
RSS_AFTER_LIMIT = 2 * 1024
PROBES = ("/alive", "/ready")
_ROOT = Path(__file__).resolve().parent.parent


def rss_kib(pid: int) -> int:
    """VmRSS of ``pid`` in KiB; -1 when it is gone (restarted)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


class Prober(threading.Thread):
    """Probes like the kubelet; records (phase, path, status, seconds)."""

    def __init__(self, daemon: Daemon) -> None:
        super().__init__(daemon=True)
        self.daemon_ = daemon
        self.phase = "idle"
        self.samples: list[tuple[str, str, int, float]] = []
        self.errors: collections.Counter[str] = collections.Counter()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.05):
            for path in PROBES:
                start = time.monotonic()
                try:
                    status = self.daemon_.get(path, timeout=1.0)[0]
                except OSError as exc:
                    status = 0
                    self.errors[type(exc).__name__] += 1
                self.samples.append((self.phase, path, status,
                                     time.monotonic() - start))

    def of(self, phase: str) -> list[tuple[int, float]]:
        return [(s, t) for p, _, s, t in self.samples if p == phase]


def attackers(port: int, slow: int, idle: int, seconds: float
              ) -> list[subprocess.Popen[str]]:
    """Start the attack processes: 2,000 connections each at most."""
    procs = []
    for mode, total in (("slowloris", slow), ("keepalive", idle)):
        while total > 0:
            n = min(total, 2000)
            total -= n
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "drills.slowclients", mode, str(port),
                 str(n), str(seconds)],
                cwd=_ROOT, stdout=subprocess.PIPE, text=True))
    return procs


def restarts(daemon: Daemon) -> int:
    return sum(int(c["restarts"]) for c in daemon.status()["components"].values())


def run(short: bool = False, seed: int = 0) -> Report:
    del seed
    slow, idle, seconds = (1000, 200, 6.0) if short else (10000, 2000, 60.0)
    report = Report("slowloris")
    with Workspace("slowloris") as ws:
        daemon = ws.start(ws.daemon())
        if not report.check(wait_ready(daemon), "daemon never became ready"):
            return report
        health_pid = daemon.worker_pids()["health"]
        restarts_before = restarts(daemon)
        prober = Prober(daemon)
        prober.start()
        time.sleep(2.0)
        rss_idle = rss_kib(health_pid)
        rss_peak = rss_idle
        prober.phase = "attack"
        procs = attackers(daemon.port, slow, idle, seconds)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            rss_peak = max(rss_peak, rss_kib(health_pid))
            time.sleep(0.25)
        stats = []
        for proc in procs:
            out, _ = proc.communicate(timeout=30)
            stats.append(json.loads(out.strip().splitlines()[-1]) if out.strip()
                         else {})
        prober.phase = "after"
        time.sleep(3.0)
        rss_after = rss_kib(health_pid)
        prober.stopping.set()
        prober.join(5)
        try:
            restarts_after = restarts(daemon)
            same_pid = daemon.worker_pids()["health"] == health_pid
        except (OSError, AssertionError):
            restarts_after, same_pid = -1, False
        exit_status = stop(daemon)
        judge(report, prober, stats)
        report.check(restarts_after == restarts_before and same_pid,
                     f"workers restarted: {restarts_before} -> {restarts_after}")
        report.check(rss_peak - rss_idle < RSS_GROWTH_LIMIT,
                     f"HealthManager RSS grew {rss_peak - rss_idle} KiB")
        report.check(0 <= rss_after - rss_idle < RSS_AFTER_LIMIT,
                     f"HealthManager RSS {rss_after - rss_idle} KiB above idle "
                     f"after the attack")
        report.check(exit_status == 0, f"daemon exit status {exit_status}")
        report.figures.update({
            "attack": f"{slow} slowloris + {idle} keep-alive, uid "
                      f"{sorted({s.get('uid') for s in stats})}, {seconds:g} s",
            "attacker connects": sum(s.get("connects", 0) for s in stats),
            "closed by server": sum(s.get("closed by server", 0) for s in stats),
            "restarts during attack": restarts_after - restarts_before,
            "HealthManager RSS KiB idle/peak/after":
                f"{rss_idle}/{rss_peak}/{rss_after}",
        })
    return report


def longest_failure_run(prober: Prober, path: str) -> int:
    run = worst = 0
    for phase, where, status, _ in prober.samples:
        if phase != "attack" or where != path:
            continue
        run = run + 1 if status != 200 else 0
        worst = max(worst, run)
    return worst


def judge(report: Report, prober: Prober, stats: list[dict[str, int]]) -> None:
    report.check(all(s.get("uid") == 65534 for s in stats),
                 f"attackers did not all run as uid 65534: {stats}")
    attack = prober.of("attack")
    seconds = [t if s == 200 else max(t, P99_LIMIT) for s, t in attack]
    report.check(bool(attack), "no probe ran during the attack")
    p99 = percentile(seconds, 99)
    report.check(p99 < P99_LIMIT, f"probe p99 {p99 * 1000:.0f} ms under attack")
    failed = [s for s, _ in attack if s != 200]
    worst = max((longest_failure_run(prober, path) for path in PROBES),
                default=0)
    report.check(worst < FAILURE_THRESHOLD,
                 f"{worst} probes in a row failed under attack: the kubelet "
                 f"would have acted ({len(failed)} of {len(attack)} failed)")
    idle = [t for _, t in prober.of("idle")]
    report.figures.update({
        "probes under attack": len(attack),
        "probes failed under attack (longest run)": f"{len(failed)} ({worst})",
        "probe errors": dict(prober.errors),
        "probe ms p50/p99/max idle (reference)": "/".join(
            f"{percentile(idle, p) * 1000:.1f}" for p in (50, 99, 100)),
        "probe ms p50/p99/max under attack": "/".join(
            f"{percentile(seconds, p) * 1000:.1f}" for p in (50, 99, 100)),
    })
