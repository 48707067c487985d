"""Probe drill: the HealthManager SIGKILLed again and again while a kubelet-
like client probes ``/alive`` and ``/ready`` at 20 Hz, a new connection
each time.

The probe listener is the master's (bound before the fork), so a probe sent
while no HealthManager runs waits in the kernel's backlog and is answered
by the next one: the invariant is **no refused connection and no probe
unanswered within its timeout**; the worst latency is reported. A *reset*
(the connection closed without an answer) is counted apart: it is a probe
the killed HealthManager had already accepted when SIGKILL arrived -- the
kernel closes the connections of a dead process, and no successor can
answer a connection it never saw. A kubelet counts it as one failed probe
(``failureThreshold`` defaults to 3). What a kubelet must never see is
checked on every run: a probe path failing twice in a row, or a reset with
no kill during the probe. Resets are rare events whose count over a few
kills is noisy (a handful of kills can land on an accepted probe by
chance), so their share of the kills is judged only over
:data:`SHARE_MIN_KILLS` kills or more (the full drill); it is reported
always.

``[supervisor] restart_backoff_max`` is 0.5 s here: with a hundred kills in
a minute the restart backoff, not the socket, would set the latency (the
default of 5 s would show up as a 5 s probe).
"""
from __future__ import annotations

import http.client
import os
import random
import signal
import threading
import time

from drills.common import Report, Workspace, eventually, percentile, stop, wait_ready
from tests.fixtures.daemon import Daemon

PROBE_HZ = 20.0
PROBE_TIMEOUT = 5.0
#: Resets allowed per kill (each is a probe accepted by the dying worker).
RESET_SHARE = 0.2
#: Kills needed before the reset share is judged (the short drill has 10).
SHARE_MIN_KILLS = 50


class Prober:
    """Probes /alive and /ready alternately, a new connection each time."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.latencies: list[float] = []
        self.outcomes: dict[str, int] = {}
        self.statuses: dict[int, int] = {}
        #: (start, end) of every probe that was reset
        self.resets: list[tuple[float, float]] = []
        #: the longest run of failed probes of one path (a kubelet's
        #: failureThreshold counts consecutive failures of its probe)
        self.worst_streak = 0
        self._streaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> Prober:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(PROBE_TIMEOUT * 2)

    def _count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def probe(self, path: str) -> None:
        start = time.monotonic()
        ok = False
        conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                          timeout=PROBE_TIMEOUT)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
        except ConnectionRefusedError:
            self._count("refused")
        except (ConnectionResetError, BrokenPipeError,
                http.client.RemoteDisconnected):
            self._count("reset")
            self.resets.append((start, time.monotonic()))
        except TimeoutError:
            self._count("timeout")
        except OSError as exc:
            self._count(f"error {exc.__class__.__name__}")
        else:
            ok = True
            self._count("answered")
            self.statuses[resp.status] = self.statuses.get(resp.status, 0) + 1
        finally:
            conn.close()
        self._streaks[path] = 0 if ok else self._streaks.get(path, 0) + 1
        self.worst_streak = max(self.worst_streak, self._streaks[path])
        self.latencies.append(time.monotonic() - start)

    def _loop(self) -> None:
        paths = ("/alive", "/ready")
        i = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.probe(paths[i % 2])
            i += 1
            next_at += 1.0 / PROBE_HZ
            self._stop.wait(max(0.0, next_at - time.monotonic()))


def health_pid(daemon: Daemon) -> int:
    try:
        comp = daemon.status()["components"]["health"]
    except (OSError, AssertionError, KeyError, ValueError):
        return 0
    return int(comp["pid"] or 0) if comp.get("state") == "running" else 0


def kill_health(daemon: Daemon, rng: random.Random, kills: int,
                report: Report, killed_at: list[float]) -> int:
    done = 0
    for i in range(kills):
        pid = health_pid(daemon)
        if not report.check(pid > 0, f"kill {i}: no HealthManager pid"):
            break
        time.sleep(rng.uniform(0.05, 0.4))
        killed_at.append(time.monotonic())
        os.kill(pid, signal.SIGKILL)
        done += 1
        if not report.check(
                eventually(lambda p=pid: health_pid(daemon) not in (0, p), 20),
                f"kill {i}: no new HealthManager"):
            break
    return done


def run(short: bool = False, seed: int = 0) -> Report:
    kills = 10 if short else 100
    rng = random.Random(seed)
    report = Report("probes")
    with Workspace("probes") as ws:
        daemon = ws.start(ws.daemon({"supervisor": {
            "max_restarts": 10 * kills, "restart_backoff_max": 0.5}}))
        if not report.check(wait_ready(daemon), "daemon never became ready"):
            return report
        prober = Prober(daemon.port).start()
        killed_at: list[float] = []
        try:
            done = kill_health(daemon, rng, kills, report, killed_at)
            time.sleep(0.5)
        finally:
            prober.stop()
        out = prober.outcomes
        refused, reset = out.get("refused", 0), out.get("reset", 0)
        report.check(refused == 0, f"{refused} probe(s) refused")
        report.check(out.get("timeout", 0) == 0,
                     f"{out.get('timeout', 0)} probe(s) unanswered within "
                     f"{PROBE_TIMEOUT:g} s")
        others = {k: v for k, v in out.items()
                  if k not in ("answered", "refused", "reset", "timeout")}
        report.check(not others, f"other probe errors: {others}")
        report.check(prober.worst_streak < 2, f"a probe path failed "
                     f"{prober.worst_streak} times in a row")
        if done >= SHARE_MIN_KILLS:
            report.check(reset <= int(RESET_SHARE * done),
                         f"{reset} probe(s) reset in {done} kills")
        # Every reset must be a probe in flight when a kill landed.
        unexplained = [r for r in prober.resets
                       if not any(r[0] <= k <= r[1] for k in killed_at)]
        report.check(not unexplained, f"{len(unexplained)} reset(s) with no "
                     "kill during the probe")
        lat = prober.latencies
        report.figures.update({
            "HealthManager kills": done,
            "probes": len(lat),
            "refused": refused,
            "reset (accepted by the killed worker)": reset,
            "most failures of one probe path in a row": prober.worst_streak,
            "timeouts": out.get("timeout", 0),
            "answers by status": dict(sorted(prober.statuses.items())),
            "latency p50/p99/max ms": "/".join(
                f"{percentile(lat, p) * 1000:.0f}" for p in (50, 99, 100)),
        })
        exit_status = stop(daemon)
        report.check(exit_status == 0, f"daemon exit status {exit_status}")
    return report
