"""The canary Service's part of a NodeNetwork's spec (what the node reads
is checked: hostile values refused), and its VIP probe in the record's
status (what the judge reads is checked)."""
from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from kuryr_supervisor.netcheck.codecs import canaryspec, clusterspec
from kuryr_supervisor.netcheck.codecs import record as nn
from kuryr_supervisor.netcheck.codecs import servicespec as ss

TARGET = ss.ServiceTarget(ipaddress.IPv4Address("10.43.0.10"), 8094)


def obj(raw: Any, node: str = "node-a") -> dict[str, Any]:
    return {"spec": {"nodeName": node, "canaryService": raw}}


def test_round_trip_and_merge_keeps_the_other_parts() -> None:
    spec = {"nodeName": "node-a", "canary": {"portId": "p"},
            "probe": {"intervalSeconds": 2}, "cluster": {"fault": "x"},
            "nodePort": {"portId": "q"}}
    out = ss.merged(spec, "node-a", TARGET)
    assert out["canaryService"] == {"address": "10.43.0.10", "port": 8094}
    assert {k: v for k, v in out.items() if k != "canaryService"} == spec
    assert ss.target({"spec": out}, "node-a") == TARGET
    # The other writers keep this part when they write theirs.
    assert canaryspec.merged(out, "node-a", canaryspec.Assignment())[
        "canaryService"] == out["canaryService"]
    assert clusterspec.merged(out, "node-a", None)["canaryService"] == \
        out["canaryService"]
    taken = ss.merged(out, "node-a", None)
    assert "canaryService" not in taken and ss.target(
        {"spec": taken}, "node-a") is None


@pytest.mark.parametrize("raw", [
    "10.43.0.10", ["10.43.0.10", 8094], {},
    {"address": "10.43.0.10"}, {"port": 8094},
    {"address": "10.43.0.10", "port": 0},
    {"address": "10.43.0.10", "port": 65536},
    {"address": "10.43.0.10", "port": -1},
    {"address": "10.43.0.10", "port": True},
    {"address": "10.43.0.10", "port": 8094.5},
    {"address": "10.43.0.10", "port": "8094"},
    {"address": 168493066, "port": 8094},
    {"address": "fd00::10", "port": 8094},
    {"address": "10.43.0.10/24", "port": 8094},
    {"address": "127.0.0.1", "port": 8094},
    {"address": "169.254.169.254", "port": 8094},
    {"address": "224.0.0.1", "port": 8094},
    {"address": "0.0.0.0", "port": 8094},
    {"address": "255.255.255.255", "port": 8094},
    {"address": "240.0.0.1", "port": 8094},
    {"address": "010.043.000.010", "port": 8094},
    {"address": " 10.43.0.10", "port": 8094},
    {"address": "10.43.0.10" + "0" * 100, "port": 8094},
])
def test_hostile_values_are_refused(raw: Any) -> None:
    with pytest.raises(ValueError, match="canaryService"):
        ss.target(obj(raw), "node-a")


def test_another_nodes_spec_is_refused() -> None:
    with pytest.raises(ValueError, match="nodeName"):
        ss.target(obj({"address": "10.43.0.10", "port": 8094}, "node-b"),
                  "node-a")


def report(service: nn.Probe | None) -> nn.NetworkReport:
    return nn.NetworkReport(nn.Daemon(True, 0.0), service=service)


def record(status: dict[str, Any]) -> dict[str, Any]:
    body = nn.body("node-a", "")
    body["status"] = status
    return body


def test_the_records_vip_probe_round_trips_and_is_a_change() -> None:
    probe = nn.Probe("", "10.43.0.10", False)
    status = nn.status(report(probe), heartbeat_seconds=60, wall=1.7e9)
    assert status["service"] == {"address": "10.43.0.10", "reached": False}
    assert nn.from_object(record(status)).report.service == probe
    assert report(probe).signature() != report(
        nn.Probe("", "10.43.0.10", True, 1.0)).signature()
    assert report(nn.Probe("", "10.43.0.10", True, 1.0)).signature() == \
        report(nn.Probe("", "10.43.0.10", True, 2.0)).signature()
    none = nn.status(report(None), heartbeat_seconds=60, wall=1.7e9)
    assert "service" not in none
    assert nn.from_object(record(none)).report.service is None


@pytest.mark.parametrize("raw", [
    "10.43.0.10", {"address": "10.43.0.10"},
    {"address": "10.43.0.10", "reached": "yes"},
    {"address": "10.43.0.10", "reached": True, "latencyMs": "1"},
])
def test_a_hostile_vip_probe_in_a_record_is_refused(raw: Any) -> None:
    status = nn.status(report(None), heartbeat_seconds=60, wall=1.7e9)
    status["service"] = raw
    with pytest.raises(ValueError, match="status.service"):
        nn.from_object(record(status))
