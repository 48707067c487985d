"""The canary's agent between its spec and its record, with stand-ins for
the plug and the prober (the real ones: tests/functional/
test_canary_probes.py and, end to end, test_ovn_health.py): it plugs the
port the spec names and aims the prober only once it is installed; what
it hands the record is nothing while the canary is down, the gateway only
once it has answered this canary, the peers of the current aim."""
from __future__ import annotations

import ipaddress
from typing import Any

from kuryr_supervisor.netcheck.codecs import canaryspec as cs
from kuryr_supervisor.netcheck.codecs.record import Canary, Probe
from kuryr_supervisor.netcheck.node.canary.agent import CanaryAgent
from kuryr_supervisor.netcheck.node.canary.prober import Aim, Seen
from kuryr_supervisor.netcheck.node.canary.probes import Outcome

GW = ipaddress.IPv4Address("10.0.0.1")
B = ipaddress.IPv4Address("10.0.0.7")
PORT = cs.CanaryPort("p1", "fa:16:3e:00:00:05",
                     ipaddress.IPv4Interface("10.0.0.5/24"), GW)


class Plug:
    def __init__(self) -> None:
        self.port: cs.CanaryPort | None = None
        self.ok = False
        self.plugged: list[str] = []

    def plug(self, port: cs.CanaryPort) -> None:
        if port != self.port:
            self.plugged.append(port.port_id)
            self.port = port

    def unplug(self) -> None:
        self.plugged.append("-")
        self.port = None

    def installed(self) -> bool:
        return self.port is not None and self.ok

    def why_not(self) -> str:
        return "ovn-controller is not running"


class Prober:
    def __init__(self) -> None:
        self.aimed = Aim()
        self.seen: Seen | None = None
        self.icmp, self.rounds, self.cpu_seconds = True, 0, 0.0
        self.responder = self

    def aim(self, aim: Aim) -> None:
        self.aimed = aim

    def outcomes(self) -> Seen | None:
        return self.seen if self.seen is not None and \
            self.seen.aim == self.aimed else None


def record(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "node-a"}, "spec": spec}


def test_spec_plug_aim_and_what_the_record_gets() -> None:
    plug, prober = Plug(), Prober()
    agent = CanaryAgent("node-a", plug, prober)  # type: ignore[arg-type]
    agent.take(None)                  # no record yet
    agent.take(record({"nodeName": "node-a"}))
    agent.step()
    assert not agent.up and "waiting for the controller" in agent.state
    assert agent.results() == (None, (), None)

    agent.take(record(cs.spec("node-a", cs.Assignment(
        PORT, (cs.Target("node-b", B),), 5.0))))
    agent.step()
    assert plug.plugged == ["p1"] and not agent.up
    assert agent.state == "port p1 not installed: ovn-controller is not " \
                          "running"
    assert prober.aimed == Aim()      # nothing probed while not installed

    plug.ok = True
    agent.step()
    assert agent.up and prober.aimed == Aim(GW, (("node-b", B),), 5.0)
    canary = Canary("10.0.0.5", "p1")
    assert agent.results() == (None, (), canary)     # no round yet
    # A round in which the gateway never answered: not probed for.
    prober.seen = Seen(prober.aimed, 1.0, {
        GW: Outcome(False, None), B: Outcome(True, True, 0.8)})
    assert agent.results() == (None, (Probe("node-b", str(B), True, 0.8),),
                               canary)
    # Once it answered, it is reported, answering or not.
    prober.seen = Seen(prober.aimed, 2.0, {
        GW: Outcome(True, None, 0.3), B: Outcome(False, False)})
    gateway, peers, _ = agent.results()
    assert gateway == Probe("", str(GW), True, 0.3)
    assert peers == (Probe("node-b", str(B), False, None),)
    prober.seen = Seen(prober.aimed, 3.0, {
        GW: Outcome(False, None), B: Outcome(True, True)})
    assert agent.results()[0] == Probe("", str(GW), False, None)
    doc = agent.status()
    assert doc["up"] and doc["port"] == "p1" and doc["interval"] == 5.0
    assert doc["gateway"]["reached"] is False
    assert doc["peers"][0]["node"] == "node-b"

    # Its port is no longer installed (deleted in Neutron): nothing is
    # handed on, even before the agent looks again.
    plug.ok = False
    assert agent.results() == (None, (), None)
    agent.step()
    assert not agent.up and prober.aimed == Aim()

    # A spec that does not hold up keeps the last one.
    plug.ok = True
    agent.step()
    agent.take(record({"nodeName": "node-a", "canary": {"mac": "x"}}))
    agent.take(record({"nodeName": "node-b"}))
    agent.step()
    assert agent.up and agent.assignment.canary == PORT

    # The controller takes the port away: unplugged.
    agent.take(record({"nodeName": "node-a"}))
    agent.step()
    assert plug.plugged[-1] == "-" and not agent.up
