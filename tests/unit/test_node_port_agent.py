"""The node port's agent on the node: nothing done before the node's
record is read (a HealthManager started again never unplugs what its
predecessor plugged), the port named plugged at every look, a hostile
spec refused with the last one kept, the port unplugged once the spec
drops it, failures said and tried again."""
from __future__ import annotations

import ipaddress
import logging
from typing import Any

import pytest

from kuryr_supervisor.cni import ovsdb
from kuryr_supervisor.netcheck.codecs import nodeportspec
from kuryr_supervisor.netcheck.codecs.nodeportspec import NodePort
from kuryr_supervisor.netcheck.node.nodeport.agent import NodePortAgent
from kuryr_supervisor.netcheck.node.nodeport.plug import NotYet

PORT = NodePort("0b3c5a1e-6a63-4d5c-9f27-1f8a3f1c2d4e", "fa:16:3e:00:00:06",
                ipaddress.IPv4Interface("10.0.0.6/24"),
                ipaddress.IPv4Address("10.0.0.1"))


class FakePlug:
    ifname = "kuryr-node0"

    def __init__(self) -> None:
        self.port: NodePort | None = None
        self.calls: list[tuple[str, Any]] = []
        self.fail: Exception | None = None

    def plug(self, port: NodePort) -> list[str]:
        self.calls.append(("plug", port.port_id))
        if self.fail is not None:
            raise self.fail
        made = [] if self.port == port else ["port"]
        self.port = port
        return made

    def unplug(self) -> bool:
        self.calls.append(("unplug", None))
        had, self.port = self.port is not None, None
        return had


def record(port: NodePort | None, **raw: Any) -> dict[str, Any]:
    spec = nodeportspec.merged({"canary": {"x": 1}}, "node-a", port)
    spec.update(raw)
    return {"metadata": {"name": "node-a"}, "spec": spec}


def agent() -> tuple[NodePortAgent, FakePlug]:
    plug = FakePlug()
    return NodePortAgent("node-a", plug), plug  # type: ignore[arg-type]


def test_nothing_before_the_record_then_plugged_every_look() -> None:
    a, plug = agent()
    a.step()
    a.take(None)                    # no record yet
    a.step()
    assert plug.calls == []
    a.take(record(PORT))
    a.step()
    a.step()
    assert plug.calls == [("plug", PORT.port_id)] * 2
    assert a.status()["port"] == PORT.port_id


def test_a_hostile_spec_is_refused_and_the_last_kept(
        caplog: pytest.LogCaptureFixture) -> None:
    a, plug = agent()
    a.take(record(PORT))
    for _ in range(3):
        a.take(record(None, nodePort={**nodeportspec.port_doc(PORT),
                                      "portId": "../x"}))
    a.take(record(None, nodeName="node-b"))
    a.step()
    assert plug.calls == [("plug", PORT.port_id)]
    refusals = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 2           # once per refusal, not per read
    # A hostile spec first of all: nothing is done (none was read).
    b, other = agent()
    b.take(record(None, nodePort="x"))
    b.step()
    assert other.calls == []


def test_unplugged_once_the_spec_drops_it() -> None:
    a, plug = agent()
    a.take(record(PORT))
    a.step()
    a.take(record(None))
    a.step()
    a.step()
    assert plug.calls == [("plug", PORT.port_id), ("unplug", None)]
    assert plug.port is None
    # One left by an earlier daemon while the spec names none: removed.
    b, other = agent()
    b.take(record(None))
    b.step()
    b.step()
    assert other.calls == [("unplug", None)]


def test_failures_are_said_and_tried_again(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    a, plug = agent()
    a.take(record(PORT))
    plug.fail = NotYet("kuryr-node0 is not in this namespace yet")
    a.step()
    a.step()
    assert "not in this namespace yet" in a.state
    plug.fail = ovsdb.OvsdbError("no bridge named br-int")
    a.step()
    assert "cannot plug" in a.state
    plug.fail = None
    a.step()
    assert a.state.startswith("plugged")
    warned = [r.getMessage() for r in caplog.records
              if r.levelno == logging.WARNING]
    assert len(warned) == 2, warned     # once per state, not per look
