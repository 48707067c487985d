"""The Node condition publisher: hysteresis, stable transition times, no storm."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes import nodes
from kuryr_supervisor.kubernetes.nodecondition import NodeConditionPublisher
from tests.fixtures.fakeapi import FakeAPI


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(grace: float = 30.0, fail: bool = False
         ) -> tuple[NodeConditionPublisher, list[dict[str, Any]], Clock]:
    patches: list[dict[str, Any]] = []
    clock = Clock()

    def patch(cond: Mapping[str, Any]) -> None:
        if fail:
            raise k8s.K8sTemporary("down")
        patches.append(dict(cond))
    wall = Clock()
    wall.now = 1_800_000_000.0
    pub = NodeConditionPublisher("KuryrCNIHealthy", patch, grace=grace,
                                 retry_interval=10, clock=clock,
                                 wall=lambda: wall.now + clock.now)
    return pub, patches, clock


def test_starts_unknown_and_turns_true_at_once() -> None:
    pub, patches, clock = make()
    assert pub.status == "Unknown"
    pub.update(False, "netlink broken")         # within grace: stays Unknown
    assert [p["status"] for p in patches] == ["Unknown"]
    pub.update(True)
    assert [p["status"] for p in patches] == ["Unknown", "True"]
    assert patches[-1]["reason"] == "KuryrCNIHealthy"


def test_false_only_after_the_grace_period() -> None:
    pub, patches, clock = make(grace=30)
    pub.update(True)
    for _ in range(5):                           # a blip shorter than grace
        clock.now += 5
        pub.update(False, "x")
    pub.update(True)
    assert [p["status"] for p in patches] == ["True"]
    for _ in range(7):
        clock.now += 5
        pub.update(False, "cni failures 3/3")
    assert [p["status"] for p in patches] == ["True", "False"]
    assert patches[-1]["reason"] == "KuryrCNIUnhealthy"
    assert patches[-1]["message"] == "cni failures 3/3"


def test_no_patch_when_nothing_changes_and_stable_transition_time() -> None:
    pub, patches, clock = make()
    pub.update(True)
    first = patches[-1]["lastTransitionTime"]
    for i in range(100):
        clock.now += 1
        pub.update(True, f"healthy, {i} pods")   # live figures: no storm
    assert len(patches) == 1
    clock.now += 100
    pub.update(False, "bad")
    clock.now += 31
    pub.update(False, "bad")
    assert len(patches) == 2
    assert patches[-1]["lastTransitionTime"] != first
    flip = patches[-1]["lastTransitionTime"]
    clock.now += 1
    pub.update(False, "still bad")
    assert len(patches) == 2 and pub.last_transition == flip


def test_failed_patches_are_retried_but_throttled() -> None:
    pub, _, clock = make(fail=True)
    calls = []
    real = pub._patch

    def counting(cond: Mapping[str, Any]) -> None:
        calls.append(cond)
        real(cond)
    pub._patch = counting
    for _ in range(20):
        clock.now += 1
        pub.update(True)
    assert len(calls) == 2                       # at t=1 and t=11, not 20


def test_against_the_api() -> None:
    api = FakeAPI().start()
    try:
        api.add_node("node-a")
        client = api.client("node-a")
        pub = NodeConditionPublisher(
            "KuryrCNIHealthy", nodes.condition_setter(client.nodes, "node-a"),
            grace=0)
        pub.update(True)
        pub.update(True)
        pub.update(False, "down")
        conds = api.nodes["node-a"]["status"]["conditions"]
        assert len(api.patches) == 2
        assert [(c["type"], c["status"]) for c in conds] == [
            ("KuryrCNIHealthy", "False")]
    finally:
        api.stop()
