"""The policy benchmark's watch: how long after a change a client pod's
TCP connections to a server come to be answered, or refused.

A process in the client's namespace sends a new connection every
:data:`STEP` seconds (more, the userspace datapath's conntrack has
crashed ovs-vswitchd), several in flight, each given :data:`LIFE` seconds
to be answered (the server's name read); it prints ``ready``, learns on
stdin the moment the change was made (monotonic seconds: the system's
clock, the same in every namespace), and ends at the first attempt sent
since then that begins :data:`WINDOW` attempts in a row (in the order
sent) with the outcome wanted, printing its send time, or ``none`` after
:data:`LIMIT` seconds.
"""
from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

STEP, LIFE, WINDOW, LIMIT = 0.1, 0.5, 5, 20.0

_WATCH = """
import socket, sys, threading, time
host, port, want = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
step, life, window, limit = (float(sys.argv[4]), float(sys.argv[5]),
                             int(sys.argv[6]), float(sys.argv[7]))
since = []
def read():
    since.append(float(sys.stdin.readline()))
threading.Thread(target=read, daemon=True).start()
results = {}
def attempt(i, t):
    ok = False
    try:
        with socket.create_connection((host, port), timeout=life) as c:
            c.settimeout(life)
            ok = bool(c.recv(64))
    except OSError:
        pass
    results[i] = (t, ok)
print("ready", flush=True)
end = time.monotonic() + limit
sent, checked, run = 0, 0, None
while time.monotonic() < end:
    t = time.monotonic()
    threading.Thread(target=attempt, args=(sent, t), daemon=True).start()
    sent += 1
    while checked in results:
        t0, ok = results[checked]
        if not since or t0 < since[0] or ok != want:
            run = None
        elif run is None:
            run = checked
        if run is not None and checked - run + 1 >= window:
            print(results[run][0], flush=True)
            sys.exit(0)
        checked += 1
    time.sleep(max(0.0, t + step - time.monotonic()))
print("none", flush=True)
"""


class Watch:
    """Watches of ``client`` (a plugged pod) to ``address`` port 80."""

    def __init__(self, client: Any, address: str, port: int = 80) -> None:
        self.client, self.address, self.port = client, address, port

    def change(self, answered: bool, make: Callable[[], object]
               ) -> float | None:
        """Seconds from ``make()`` (the change, called once the watch
        runs) to the first of :data:`WINDOW` attempts in a row
        ``answered`` (or refused); None: not within :data:`LIMIT`."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.client.netns, "/usr/bin/python3",
             "-c", _WATCH, self.address, str(self.port),
             "1" if answered else "0", str(STEP), str(LIFE), str(WINDOW),
             str(LIMIT)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            assert proc.stdout.readline().strip() == "ready"
            t0 = time.monotonic()
            make()
            proc.stdin.write(f"{t0}\n")
            proc.stdin.flush()
            line = proc.stdout.readline().strip()
        finally:
            proc.kill()
            proc.wait()
        return None if line in ("none", "") else float(line) - t0


class Crashes:
    """The Open vSwitch aborts met while sampling: Debian 12's Open vSwitch
    3.1 userspace datapath may abort in its conntrack under the watches'
    connections; the stack starts ovs-vswitchd again (tests/fixtures/ovs),
    and a sample taken while a node's datapath died is not the handler's:
    it is taken again once OVN has its flows back on every chassis, at
    most ``most`` times a run (each abort said in the notes)."""

    def __init__(self, stack: Any, most: int = 6) -> None:
        from tests.fixtures.netpol.ovnpods import datapath_faults
        self.stack, self.most, self._faults = stack, most, datapath_faults
        self.seen = len(datapath_faults(stack))
        self.lines: list[str] = []

    def sample(self, take: Callable[[], T]) -> T:
        """``take()`` (a sample that leaves the cluster as it found it),
        again while a node's datapath died during it."""
        while True:
            got = take()
            found = self._faults(self.stack)
            if len(found) <= self.seen:
                return got
            self.lines += found[self.seen:]
            self.seen = len(found)
            if len(self.lines) > self.most:
                raise RuntimeError(f"{len(self.lines)} Open vSwitch aborts: "
                                   f"{self.lines[-1]}")
            self.stack.fabric.central.nbctl("--wait=hv", "sync")
            time.sleep(1)
