"""Saturation: every CNI request slot held by slow clients; probes must stay
fast and say so, and the daemon must recover once the clients let go.

The Server takes a slot as soon as it accepts a connection, so a client
that sends its headers and then trickles a body a byte at a time holds one
for as long as it keeps trickling (each byte resets the read timeout). With
``[cni_daemon] max_concurrency`` slow clients the Server is saturated.

Why it matters: Kuryr's health endpoints stayed green while its CNI server
was full; kubelet then kept sending pods to a node that could not plumb
them. Here ``/ready`` must fail naming ``server-capacity``, ``/status`` must
say ``inflight == capacity``, ``/alive`` must stay 200 (a full server is
busy, not dead: restarting it would drop every request), and every probe
must answer well within the kubelet's 1 s timeout (p99 under 50 ms).
"""
from __future__ import annotations

import collections
import socket
import threading
import time
from typing import Any

from drills.common import Report, Workspace, eventually, percentile, stop, wait_ready
from tests.fixtures.daemon import Daemon

CAPACITY = 4
P99_LIMIT = 0.050
PROBES = ("/alive", "/ready", "/startup", "/status")


class Prober(threading.Thread):
    """Probes the daemon in a loop, recording (phase, path, status, s)."""

    def __init__(self, daemon: Daemon) -> None:
        super().__init__(daemon=True)
        self.daemon_ = daemon
        self.phase = "baseline"
        self.samples: list[tuple[str, str, int, float]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            for path in PROBES:
                start = time.monotonic()
                try:
                    status = self.daemon_.get(path, timeout=1.0)[0]
                except OSError:
                    status = 0
                self.samples.append((self.phase, path, status,
                                     time.monotonic() - start))
            time.sleep(0.02)

    def of(self, phase: str, path: str | None = None) -> list[tuple[int, float]]:
        return [(s, t) for p, q, s, t in self.samples
                if p == phase and (path is None or q == path)]


class SlowClients:
    """``n`` connections that send headers, then one body byte at a time."""

    def __init__(self, socket_path: str, n: int) -> None:
        self.socks: list[socket.socket] = []
        self.stopping = threading.Event()
        head = (b"POST /cni HTTP/1.0\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100000\r\n\r\n{")
        for _ in range(n):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(socket_path)
            sock.sendall(head)
            self.socks.append(sock)
        self.thread = threading.Thread(target=self._trickle, daemon=True)
        self.thread.start()

    def _trickle(self) -> None:
        while not self.stopping.wait(0.5):
            for sock in self.socks:
                try:
                    sock.send(b" ")
                except OSError:
                    pass

    def release(self) -> None:
        self.stopping.set()
        self.thread.join(5)
        for sock in self.socks:
            sock.close()


def saturate_once(ws: Workspace, daemon: Daemon, prober: Prober, hold: float,
                  netns: str, report: Report, figures: dict[str, list[Any]]) -> None:
    prober.phase = "saturating"     # until /ready says so
    clients = SlowClients(str(daemon.socket_path), CAPACITY)
    start = time.monotonic()
    try:
        seen = eventually(lambda: daemon.probe("/ready") == 503, 5)
        report.check(seen, "/ready did not fail with every slot taken")
        figures["detected s"].append(time.monotonic() - start)
        prober.phase = "saturated"
        code, body = daemon.get("/ready?verbose")
        report.check(code == 503 and "[-]server-capacity" in body,
                     f"/ready does not name server-capacity: {code} {body!r}")
        status = daemon.status()
        report.check(status["server"] == {"inflight": CAPACITY, "capacity": CAPACITY},
                     f"/status server: {status['server']}")
        report.check(status["checks"]["server-capacity"]["state"] != "ok",
                     f"/status server-capacity: {status['checks']['server-capacity']}")
        waiting = ws.shim("ADD", ws.netconf(daemon, timeout=2.0),
                          container_id="ksvxsat", netns=netns, limit=30)
        report.check(waiting.code == 11 and waiting.seconds < 2.0 + 3.0,
                     f"ADD while saturated: {waiting.stdout!r} in {waiting.seconds:.1f} s")
        time.sleep(max(0.0, hold - (time.monotonic() - start)))
    finally:
        prober.phase = "releasing"
        clients.release()
    released = time.monotonic()
    report.check(eventually(lambda: daemon.probe("/ready") == 200, 10),
                 "/ready did not recover after the clients left")
    figures["recovered s"].append(time.monotonic() - released)
    prober.phase = "recovered"
    ws.shim("DEL", ws.netconf(daemon), container_id="ksvxsat", netns=netns)


def run(short: bool = False, seed: int = 0) -> Report:
    del seed                       # nothing random here
    cycles, hold = (1, 3.0) if short else (5, 20.0)
    report = Report("saturation")
    with Workspace("saturation") as ws:
        daemon = ws.start(ws.daemon({"cni_daemon": {"max_concurrency": CAPACITY}}))
        if not report.check(wait_ready(daemon), "daemon never became ready"):
            return report
        netns = ws.netns()
        prober = Prober(daemon)
        prober.start()
        figures: dict[str, list[Any]] = collections.defaultdict(list)
        try:
            time.sleep(1.0)
            for _ in range(cycles):
                saturate_once(ws, daemon, prober, hold, netns, report, figures)
            time.sleep(1.0)
        finally:
            prober.stopping.set()
            prober.join(5)
        after = ws.shim("ADD", ws.netconf(daemon), container_id="ksvxafter",
                        netns=netns)
        report.check(after.status == 0, f"ADD after recovery: {after.stdout!r}")
        ws.shim("DEL", ws.netconf(daemon), container_id="ksvxafter", netns=netns)
        exit_status = stop(daemon)
        report.check(exit_status == 0, f"daemon exit status {exit_status}")
        judge(prober, report)
        report.figures.update({
            "cycles": cycles, "held s": hold, "capacity": CAPACITY,
            "saturation detected s (max)": round(max(figures["detected s"], default=0), 2),
            "recovered s (max)": round(max(figures["recovered s"], default=0), 2),
        })
    return report


def judge(prober: Prober, report: Report) -> None:
    """Probe latencies and answers per phase."""
    saturated = prober.of("saturated")
    seconds = [t for _, t in saturated]
    p99 = percentile(seconds, 99)
    report.check(bool(saturated), "no probe ran while saturated")
    report.check(p99 < P99_LIMIT, f"probe p99 {p99 * 1000:.1f} ms while saturated")
    report.check(all(s != 0 for s, _ in saturated), "a probe went unanswered")
    alive = prober.of("saturated", "/alive")
    report.check(all(s == 200 for s, _ in alive),
                 f"/alive failed while saturated: {collections.Counter(s for s, _ in alive)}")
    ready = prober.of("saturated", "/ready")
    report.check(all(s == 503 for s, _ in ready),
                 f"/ready not 503 while saturated: {collections.Counter(s for s, _ in ready)}")
    recovered = prober.of("recovered", "/ready")
    report.check(all(s == 200 for s, _ in recovered),
                 f"/ready after recovery: {collections.Counter(s for s, _ in recovered)}")
    base = [t for _, t in prober.of("baseline")]
    report.figures.update({
        "probes while saturated": len(saturated),
        "probe ms p50/p99/max saturated": "/".join(
            f"{percentile(seconds, p) * 1000:.1f}" for p in (50, 99, 100)),
        "probe ms p50/p99 baseline": "/".join(
            f"{percentile(base, p) * 1000:.1f}" for p in (50, 99)),
        "/alive while saturated": dict(collections.Counter(s for s, _ in alive)),
        "/ready while saturated": dict(collections.Counter(s for s, _ in ready)),
    })
