"""The policy benchmark's reference: the rules a per-pod-IP scheme needs
for the same policies and pods (benchmarks/policycluster.py)."""
from __future__ import annotations

import types

import pytest

from benchmarks.policycluster import _cidrs, per_pod_ip_rules
from tests.fixtures.netpol.objects import labels, namespace, pod, policy


def _api(pods: list[dict], namespaces: list[dict],
         policies: list[dict]) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        pods={(p["metadata"]["namespace"], p["metadata"]["name"]): p
              for p in pods},
        namespace_objects={("", n["metadata"]["name"]): n
                           for n in namespaces},
        networkpolicies={(p["metadata"]["namespace"], p["metadata"]["name"]):
                         p for p in policies})


def test_an_ip_block_is_its_cidr_less_its_excepts() -> None:
    pieces = _cidrs({"cidr": "10.0.0.0/8",
                     "except": ["10.40.0.0/26", "10.40.0.64/27"]})
    assert len(pieces) == 18
    assert sum(p.num_addresses for p in pieces) == 2 ** 24 - 64 - 32
    assert _cidrs({"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}
                  ) == _cidrs({"cidr": "10.0.0.0/8"})


def test_one_rule_per_peer_address_and_port() -> None:
    nss = [namespace("a", team="x"), namespace("b")]
    pods = [pod("a", f"c{i}", f"10.1.0.{i}", {"role": "client"})
            for i in range(5)]
    pods += [pod("b", "c9", "10.1.1.9", {"role": "client"}),
             pod("a", "web", "10.1.0.50", {"app": "web"})]
    pols = [
        policy("a", "two-ports", labels(app="web"), ingress=[{
            "from": [{"podSelector": labels(role="client")}],
            "ports": [{"port": 80}, {"port": 443}]}]),
        policy("a", "any-ns", labels(app="web"), ingress=[{
            "from": [{"namespaceSelector": {},
                      "podSelector": labels(role="client")}]}]),
        policy("a", "block", labels(app="web"), egress=[{
            "to": [{"ipBlock": {"cidr": "10.1.0.0/24",
                                "except": ["10.1.0.0/25"]}}]}],
            types=["Egress"]),
        policy("a", "open", {}, ingress=[{}]),
    ]
    assert per_pod_ip_rules(_api(pods, nss, pols)) == {
        "two-ports": 5 * 2, "any-ns": 6, "block": 1, "open": 1}


def test_a_sample_taken_while_a_datapath_died_is_taken_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An Open vSwitch abort during a sample (a new EMER line in a node's
    log): the sample is taken again once OVN synced; more aborts than
    allowed end the run."""
    from benchmarks import policywatch
    from tests.fixtures.netpol import ovnpods
    log: list[str] = ["old abort"]
    synced: list[tuple[str, ...]] = []
    stack = types.SimpleNamespace(fabric=types.SimpleNamespace(
        central=types.SimpleNamespace(nbctl=lambda *a: synced.append(a))))
    monkeypatch.setattr(ovnpods, "datapath_faults", lambda s: list(log))
    monkeypatch.setattr(policywatch.time, "sleep", lambda s: None)
    crashes = policywatch.Crashes(stack, most=2)
    takes = []

    def take() -> int:
        takes.append(1)
        if len(takes) == 1:
            log.append("abort during the first take")
        return len(takes)
    assert crashes.sample(take) == 2
    assert crashes.lines == ["abort during the first take"]
    assert synced == [("--wait=hv", "sync")]
    assert crashes.sample(lambda: 7) == 7

    def crashing() -> int:
        log.append("again")
        return 0
    with pytest.raises(RuntimeError, match="3 Open vSwitch aborts"):
        crashes.sample(crashing)
