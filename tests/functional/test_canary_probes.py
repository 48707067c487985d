"""The canary's probes between two real namespaces of the daemon's own
(``OwnNetns``, joined by a veth): one round reaches a peer's canary by
ICMP and by the TCP exchange with its responder, counts an address
nobody holds as not reached within the bound, and the responder stays
bounded under clients that connect and say nothing."""
from __future__ import annotations

import ipaddress
import secrets
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kuryr_supervisor.netcheck.node.canary import probes
from kuryr_supervisor.netcheck.node.canary.netns import OwnNetns

pytestmark = pytest.mark.privileged

A, B = ipaddress.IPv4Address("10.99.0.1"), ipaddress.IPv4Address("10.99.0.2")
PORT = 8094


@pytest.fixture
def pair() -> Iterator[tuple[OwnNetns, OwnNetns]]:
    a, b = OwnNetns(), OwnNetns()
    ends = [f"ksc{secrets.token_hex(4)}" for _ in "ab"]
    try:
        subprocess.run(["ip", "link", "add", ends[0], "netns", a.path,
                        "type", "veth", "peer", "name", ends[1], "netns",
                        b.path], check=True)
        for ns, end, address in ((a, ends[0], A), (b, ends[1], B)):
            subprocess.run(
                ["nsenter", f"--net={ns.path}", "sh", "-c",
                 f"ip addr add {address}/24 dev {end} && ip link set {end} "
                 "up && ip link set lo up"], check=True)
        yield a, b
    finally:
        a.close()          # the namespaces go, and the veth with them
        b.close()


def inside(ns: OwnNetns, fn: Any) -> Any:
    box: dict[str, Any] = {}

    def run() -> None:
        ns.enter()
        box["out"] = fn()
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return box["out"]


def test_a_round_and_the_responder(pair: tuple[OwnNetns, OwnNetns]) -> None:
    a, b = pair
    responder = probes.Responder(PORT, b.enter).start()
    try:
        def round_() -> tuple[dict[Any, probes.Outcome], float]:
            icmp = probes.icmp_socket()
            assert icmp is not None          # root: CAP_NET_RAW
            started = time.monotonic()
            try:
                out = probes.probe_round(
                    [probes.Target(B, True),
                     probes.Target(ipaddress.IPv4Address("10.99.0.3"), True)],
                    port=PORT, timeout=0.5, icmp=icmp)
            finally:
                icmp.close()
            return out, time.monotonic() - started
        out, took = inside(a, round_)
        assert out[B].icmp is True and out[B].tcp is True and out[B].reached
        assert out[B].latency_ms is not None and out[B].latency_ms < 500
        nobody = out[ipaddress.IPv4Address("10.99.0.3")]
        assert (nobody.icmp, nobody.tcp, nobody.reached) == (False, False,
                                                              False)
        assert took < 0.6                   # bounded by the timeout
        assert responder.answered == 1

        # Clients that connect and say nothing: at most MAX_CLIENTS held,
        # each let go after CLIENT_SECONDS; a probe gets through after.
        # (A connect may find the listen queue full for a moment while the
        # responder's thread waits for the interpreter: the kernel sends
        # the SYN again after a second, so allow one retransmission.)
        def flood() -> list[socket.socket]:
            held = []
            for _ in range(probes.MAX_CLIENTS * 2):
                sock = socket.create_connection((str(B), PORT), timeout=3)
                held.append(sock)
            return held
        held = inside(a, flood)
        time.sleep(probes.CLIENT_SECONDS + 0.5)
        out, _ = inside(a, round_)
        assert out[B].tcp is True
        for sock in held:
            sock.close()
    finally:
        responder.stop()


#: A raw ICMP socket made inside a namespace of the daemon's own, under a
#: capability bounding set (as the DaemonSet's securityContext sets it).
RAW = """
from kuryr_supervisor.netcheck.node.canary.netns import OwnNetns
from kuryr_supervisor.netcheck.node.canary.probes import icmp_socket
ns = OwnNetns()
out = {}
import threading
def make():
    ns.enter()
    out["sock"] = icmp_socket()
t = threading.Thread(target=make); t.start(); t.join()
print("raw" if out["sock"] is not None else "none")
"""


@pytest.mark.parametrize(("caps", "says"), [
    ("+net_admin,+sys_admin", "none"),
    ("+net_admin,+sys_admin,+net_raw", "raw")])
def test_icmp_needs_net_raw(caps: str, says: str) -> None:
    """The ovs component grants NET_RAW for the canary's ICMP: without it
    no raw socket (the prober then probes by TCP alone); the namespace
    itself needs only SYS_ADMIN."""
    import sys
    done = subprocess.run(
        ["setpriv", f"--bounding-set=-all,{caps}", "--inh-caps=-all",
         sys.executable, "-c", RAW], capture_output=True, text=True,
        timeout=30, check=True)
    assert done.stdout.strip() == says, done.stderr
