"""The spec the controller writes into a node's record (its canary port,
whom it probes how often), and what a node refuses to read from it."""
from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from kuryr_supervisor.netcheck.codecs import canaryspec as cs

A = cs.Assignment(
    cs.CanaryPort("port-1", "fa:16:3e:00:00:05",
                  ipaddress.IPv4Interface("10.0.0.5/24"),
                  ipaddress.IPv4Address("10.0.0.1")),
    (cs.Target("node-b", ipaddress.IPv4Address("10.0.0.7")),
     cs.Target("node-c", ipaddress.IPv4Address("10.0.0.9"))), 5.0)


def obj(**spec: Any) -> dict[str, Any]:
    return {"spec": {"nodeName": "node-a", **spec}}


def test_round_trip() -> None:
    written = cs.spec("node-a", A)
    assert written == {
        "nodeName": "node-a",
        "canary": {"portId": "port-1", "mac": "fa:16:3e:00:00:05",
                   "address": "10.0.0.5/24", "gateway": "10.0.0.1"},
        "probe": {"intervalSeconds": 5.0, "peers": [
            {"node": "node-b", "address": "10.0.0.7"},
            {"node": "node-c", "address": "10.0.0.9"}]}}
    assert cs.assignment({"spec": written}, "node-a") == A
    assert cs.assignment(obj(), "node-a") == cs.Assignment()
    bare = cs.spec("node-a", cs.Assignment(
        cs.CanaryPort("p", "fa:16:3e:00:00:05",
                      ipaddress.IPv4Interface("10.0.0.5/24"))))
    assert bare == {"nodeName": "node-a", "canary": {
        "portId": "p", "mac": "fa:16:3e:00:00:05", "address": "10.0.0.5/24"}}
    assert cs.assignment({"spec": bare}, "node-a").canary is not None


CANARY = {"portId": "p", "mac": "fa:16:3e:00:00:05", "address": "10.0.0.5/24"}


@pytest.mark.parametrize(("spec", "says"), [
    ({"nodeName": "node-b"}, "spec.nodeName is not this node"),
    ({"canary": "x"}, "spec.canary is not an object"),
    ({"canary": {**CANARY, "mac": "01:00:5e:00:00:01"}}, "unicast MAC"),
    ({"canary": {**CANARY, "mac": "zz"}}, "unicast MAC"),
    ({"canary": {**CANARY, "address": "10.0.0.0/24"}}, "not a host"),
    ({"canary": {**CANARY, "address": "10.0.0.5/32"}}, "not a host"),
    ({"canary": {**CANARY, "address": "nope"}}, "spec.canary:"),
    ({"canary": {**CANARY, "gateway": "10.1.0.1"}}, "not in its subnet"),
    ({"canary": {**CANARY, "portId": ""}}, "spec.canary.portId"),
    ({"probe": {"intervalSeconds": 0.1}}, "intervalSeconds"),
    ({"probe": {"intervalSeconds": True}}, "intervalSeconds"),
    ({"probe": {"intervalSeconds": 5, "peers": [{}] * 65}}, "at most 64"),
    ({"probe": {"intervalSeconds": 5, "peers": [
        {"node": "node-a", "address": "10.0.0.5"}]}}, "another node's"),
    ({"probe": {"intervalSeconds": 5, "peers": [
        {"node": "Node_B", "address": "10.0.0.5"}]}}, "another node's"),
    ({"probe": {"intervalSeconds": 5, "peers": [
        {"node": "node-b", "address": "::1"}]}}, r"peers\[0\]"),
])
def test_what_a_node_refuses(spec: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        cs.assignment(obj(**spec), "node-a")
