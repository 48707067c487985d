"""The node port's part of a NodeNetwork record's spec: written and read
back, other writers' keys kept, and a hostile spec refused (the node
keeps what it had)."""
from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from kuryr_supervisor.netcheck.codecs import canaryspec, nodeportspec
from kuryr_supervisor.netcheck.codecs.nodeportspec import NodePort

PORT = NodePort("0b3c5a1e-6a63-4d5c-9f27-1f8a3f1c2d4e", "fa:16:3e:00:00:06",
                ipaddress.IPv4Interface("10.0.0.6/24"),
                ipaddress.IPv4Address("10.0.0.1"))


def record(spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "node-a"}, "spec": spec}


def test_written_and_read_back_beside_the_others() -> None:
    canary = canaryspec.spec("node-a", canaryspec.Assignment(PORT))
    current = {**canary, "cluster": {"verdict": "x"}}
    spec = nodeportspec.merged(current, "node-a", PORT)
    assert spec["cluster"] == {"verdict": "x"} and spec["canary"]
    assert nodeportspec.node_port(record(spec), "node-a") == PORT
    # The canary's writer keeps the node port.
    again = canaryspec.merged(spec, "node-a", canaryspec.Assignment())
    assert nodeportspec.node_port(record(again), "node-a") == PORT
    gone = nodeportspec.merged(spec, "node-a", None)
    assert "nodePort" not in gone and gone["cluster"] == {"verdict": "x"}
    assert nodeportspec.node_port(record(gone), "node-a") is None


def good(**change: Any) -> dict[str, Any]:
    doc = {"portId": PORT.port_id, "mac": PORT.mac, "address": "10.0.0.6/24",
           "gateway": "10.0.0.1"}
    doc.update(change)
    return {k: v for k, v in doc.items() if v is not None}


@pytest.mark.parametrize("raw, why", [
    ("a string", "not an object"),
    ([good()], "not an object"),
    (good(mac="01:00:5e:00:00:01"), "not a unicast MAC"),
    (good(mac="fa:16:3e:00:00"), "not a unicast MAC"),
    (good(mac=7), "not a string"),
    (good(address="10.0.0.0/24"), "not a host of its subnet"),
    (good(address="10.0.0.255/24"), "not a host of its subnet"),
    (good(address="10.0.0.6/31"), "not a host of its subnet"),
    (good(address="10.0.0.6/33"), "spec.nodePort:"),
    (good(address="fe80::1/64"), "spec.nodePort:"),
    (good(gateway="10.0.1.1"), "gateway is not in its subnet"),
    (good(gateway="10.0.0.6"), "gateway is its own address"),
    (good(portId=""), "not a string"),
    (good(portId="x" * 300), "not a string"),
    (good(portId="../../etc"), "not a Neutron port id"),
    (good(portId="id\n--"), "not a Neutron port id"),
    (good(portId=None), "not a string"),
])
def test_hostile_specs_refused(raw: Any, why: str) -> None:
    with pytest.raises(ValueError, match=why.replace("(", r"\(")):
        nodeportspec.node_port(record({"nodeName": "node-a",
                                       "nodePort": raw}), "node-a")


def test_another_nodes_spec_refused() -> None:
    spec = nodeportspec.merged(None, "node-b", PORT)
    with pytest.raises(ValueError, match="not this node"):
        nodeportspec.node_port(record(spec), "node-a")
    with pytest.raises(ValueError, match="not this node"):
        nodeportspec.node_port({"spec": "x"}, "node-a")


def test_the_node_says_it_wants_a_node_port() -> None:
    """``nodePortWanted`` in the record's status: written when the node
    plugs one, read back, anything but a boolean refused."""
    from kuryr_supervisor.netcheck.codecs import record as nn
    report = nn.NetworkReport(nn.Daemon(True, 1.7e9), node_port_wanted=True)
    status = nn.status(report, heartbeat_seconds=60, wall=1.7e9)
    assert status["nodePortWanted"] is True
    meta, spec = {"name": "node-a"}, {"nodeName": "node-a"}
    obj = {"metadata": meta, "spec": spec, "status": status}
    assert nn.from_object(obj).report.node_port_wanted is True
    bare = nn.status(nn.NetworkReport(nn.Daemon(True, 1.7e9)),
                     heartbeat_seconds=60, wall=1.7e9)
    assert "nodePortWanted" not in bare
    assert nn.from_object({**obj, "status": bare}).report.node_port_wanted \
        is False
    with pytest.raises(ValueError, match="nodePortWanted is not a boolean"):
        nn.from_object({**obj, "status": {**status, "nodePortWanted": "yes"}})


def test_the_service_range_written_and_read_back() -> None:
    port = NodePort(PORT.port_id, PORT.mac, PORT.address, PORT.gateway,
                    ipaddress.IPv4Network("10.96.0.0/12"))
    spec = nodeportspec.merged(None, "node-a", port)
    assert spec["nodePort"]["serviceCIDR"] == "10.96.0.0/12"
    assert nodeportspec.node_port(record(spec), "node-a") == port
    # Without one, none is written and none read.
    bare = nodeportspec.merged(None, "node-a", PORT)
    assert "serviceCIDR" not in bare["nodePort"]
    assert nodeportspec.node_port(record(bare), "node-a") == PORT


@pytest.mark.parametrize("cidr, why", [
    ("0.0.0.0/0", "wider than /8"),
    ("10.0.0.0/7", "wider than /8"),
    ("127.0.0.0/8", "not unicast space"),
    ("169.254.0.0/16", "not unicast space"),
    ("224.0.0.0/8", "not unicast space"),
    ("240.0.0.0/8", "not unicast space"),
    ("10.96.0.1/12", "serviceCIDR:"),
    ("fd00::/64", "serviceCIDR:"),
    ("10.0.0.0/16", "overlaps the port's subnet"),
    ("10.0.0.128/25", "overlaps the port's subnet"),
    (7, "not a CIDR"),
    ("1" * 100, "not a CIDR"),
])
def test_a_hostile_service_range_is_refused(cidr: Any, why: str) -> None:
    spec = {"nodeName": "node-a", "nodePort": good(serviceCIDR=cidr)}
    with pytest.raises(ValueError, match=why):
        nodeportspec.node_port(record(spec), "node-a")


def test_a_service_range_without_a_gateway_is_refused() -> None:
    spec = {"nodeName": "node-a",
            "nodePort": good(gateway=None, serviceCIDR="10.96.0.0/12")}
    with pytest.raises(ValueError, match="needs a gateway"):
        nodeportspec.node_port(record(spec), "node-a")
