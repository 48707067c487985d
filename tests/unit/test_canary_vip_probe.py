"""The canary's probe of the canary Service's VIP: a TCP exchange alone
(no ICMP: the router may answer an echo for a VIP whose load balancer
is gone), on the Service's port, not the peers'; real sockets on
loopback."""
from __future__ import annotations

import ipaddress
import socket

from kuryr_supervisor.netcheck.codecs.record import Probe
from kuryr_supervisor.netcheck.node.canary.prober import Aim
from kuryr_supervisor.netcheck.node.canary.probes import (
    Responder,
    Target,
    probe_round,
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


LOOPBACK = ipaddress.IPv4Address("127.0.0.1")


def test_the_vip_is_reached_by_tcp_on_its_own_port() -> None:
    port = free_port()
    responder = Responder(port).start()
    try:
        out = probe_round([Target(LOOPBACK, True, port, icmp=False)],
                          port=free_port(), timeout=1.0, icmp=None)
    finally:
        responder.stop()
    assert out[LOOPBACK].reached and out[LOOPBACK].tcp is True
    assert out[LOOPBACK].icmp is None


def test_one_answer_of_three_tries_is_reached() -> None:
    """Three exchanges at once, one answered (a load balancer with a dead
    backend, or the prober's own canary behind it): reached."""
    port = free_port()
    responder = Responder(port).start()
    try:
        out = probe_round([Target(LOOPBACK, True, port, icmp=False,
                                  tries=3)],
                          port=free_port(), timeout=1.0, icmp=None)
    finally:
        responder.stop()
    assert out[LOOPBACK].reached


def test_a_vip_that_does_not_answer_is_not_reached() -> None:
    out = probe_round([Target(LOOPBACK, True, free_port(), icmp=False)],
                      port=free_port(), timeout=0.5, icmp=None)
    assert not out[LOOPBACK].reached and out[LOOPBACK].tcp is False


def test_the_aim_probes_the_vip_by_tcp_alone() -> None:
    aim = Aim(ipaddress.IPv4Address("10.0.0.1"), (
        ("node-b", ipaddress.IPv4Address("10.0.0.7")),), 2.0,
        (ipaddress.IPv4Address("10.43.0.10"), 8094))
    assert aim.targets()[-1] == Target(ipaddress.IPv4Address("10.43.0.10"),
                                       True, 8094, icmp=False, tries=3)
    assert len(Aim(peers=aim.peers, interval=2.0).targets()) == 1


def canary_doc(service: dict[str, object] | None) -> dict[str, object]:
    return {"up": True, "state": "up", "port": "p", "address": "10.0.0.5/24",
            "interval": 2.0, "icmp": True, "rounds": 3, "cpuSeconds": 0.1,
            "gateway": None, "peers": [], "service": service}


def test_the_vip_probe_in_metrics_and_the_status_line() -> None:
    from kuryr_supervisor.cli import status
    from kuryr_supervisor.health import metrics
    service = {"address": "10.43.0.10", "port": 8094, "reached": False,
               "icmp": None, "tcp": False, "latencyMs": None}
    families = {f.name: f for f in metrics._canary(canary_doc(service))}
    samples = {tuple(s.labels.items()): s.value
               for s in families["kuryr_supervisor_canary_reached"].samples}
    assert samples == {(("target", "service"), ("protocol", "tcp")): 0.0}
    doc = {"network": {"canary": canary_doc(service)}, "checks": {}}
    assert "service VIP UNREACHABLE" in str(status.network_line(doc))
    service.update(reached=True, tcp=True, latencyMs=1.5)
    assert "service VIP ok" in str(status.network_line(doc))
    none = {f.name: f for f in metrics._canary(canary_doc(None))}
    assert not none["kuryr_supervisor_canary_reached"].samples


def test_the_record_gets_the_vip_once_it_answered_this_canary() -> None:
    """A new canary Service's load balancer comes a moment after it: until
    the VIP first answers this canary, its failures are not reported
    (every node would fail it at once); afterwards they are."""
    from kuryr_supervisor.netcheck.codecs import canaryspec as cs
    from kuryr_supervisor.netcheck.node.canary.agent import CanaryAgent
    from kuryr_supervisor.netcheck.node.canary.prober import Seen
    from kuryr_supervisor.netcheck.node.canary.probes import Outcome
    from tests.unit.test_canary_agent import PORT, Plug, Prober, record
    vip = ipaddress.IPv4Address("10.43.0.10")
    plug, prober = Plug(), Prober()
    agent = CanaryAgent("node-a", plug, prober)  # type: ignore[arg-type]
    spec = cs.spec("node-a", cs.Assignment(PORT, (), 2.0))
    spec["canaryService"] = {"address": str(vip), "port": 8094}
    agent.take(record(spec))
    plug.ok = True
    agent.step()
    assert agent.up and prober.aimed.service == (vip, 8094)

    def round_(reached: bool) -> None:
        prober.seen = Seen(prober.aimed, 1.0, {vip: Outcome(
            None, reached, 1.0 if reached else None)})
    round_(False)
    assert agent.service() is None            # never answered yet
    round_(True)
    assert agent.service() == Probe("", str(vip), True, 1.0)
    round_(False)
    assert agent.service() == Probe("", str(vip), False, None)
    # A hostile canaryService is refused: no VIP probed.
    spec["canaryService"] = {"address": "127.0.0.1", "port": 8094}
    agent.take(record(spec))
    agent.step()
    assert prober.aimed.service is None and agent.service() is None
