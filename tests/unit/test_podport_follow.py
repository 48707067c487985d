"""The node's follower of its pods' PodPorts (kubernetes/podportfollow.py)
against the Kubernetes API fake over HTTP: it lists and watches the
PodPorts labelled with its node only, hands each pod's UID, MAC and port
to the binding's ``repoint``, and tells a pod whose interface cannot be
pointed at its new port (a Warning Event ``PortLost``) and books it as
lost until a repoint succeeds or its PodPort goes. The binding's
side against a real Open vSwitch: tests/functional/test_ovs_repoint.py."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from kuryr_supervisor.kubernetes import podport
from kuryr_supervisor.kubernetes.events import Note
from kuryr_supervisor.kubernetes.lostpods import LostPods
from kuryr_supervisor.kubernetes.podportfollow import PodPortFollower
from kuryr_supervisor.state.lostports import LostPorts
from tests.fixtures.fakeapi import FakeAPI


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    server = FakeAPI().start()
    yield server
    server.stop()


def podport_of(name: str, node: str, port: str) -> dict[str, object]:
    data = podport.PortData.from_mapping({
        "portId": port, "podUid": f"uid-{name}", "mac": "0e:6b:73:00:00:01",
        "address": "10.0.0.5/24", "gateway": "10.0.0.1"})
    return podport.body("ns", name, data, node)


def wait_for(what: Callable[[], bool], timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def test_follows_its_nodes_podports_and_tells_what_it_cannot_do(
        api: FakeAPI) -> None:
    calls: list[tuple[str, str, str]] = []
    told: list[Note] = []

    def repoint(uid: str, mac: str, port: str) -> str:
        calls.append((uid, mac, port))
        if port == "broken":
            raise RuntimeError("interface has another MAC")
        return "ksv000000000001" if port == "p2" else ""
    api.put_podport(podport_of("a", "node-1", "p1"))
    api.put_podport(podport_of("b", "node-2", "q1"))     # another node's
    stopping = threading.Event()
    try:
        PodPortFollower(api.client(), "node-1", repoint, backoff_max=0.5,
                        tell=told.append).start(stopping)
        wait_for(lambda: calls == [("uid-a", "0e:6b:73:00:00:01", "p1")])
        api.put_podport(podport_of("a", "node-1", "p2"))   # made again
        wait_for(lambda: len(calls) == 2)
        assert calls[-1][2] == "p2"
        api.put_podport(podport_of("a", "node-1", "broken"))
        wait_for(lambda: len(told) == 1)
        assert told[0].reason == "PortLost" and told[0].type == "Warning"
        assert told[0].subject is not None and told[0].subject.name == "a"
        api.put_podport(podport_of("b", "node-2", "q2"))
        time.sleep(0.3)
        assert all(uid == "uid-a" for uid, _, _ in calls)
    finally:
        stopping.set()


def test_a_pod_is_lost_until_its_port_is_pointed_at_or_its_podport_goes(
        api: FakeAPI) -> None:
    published: list[LostPorts] = []
    broken = {"p2", "q2"}

    def repoint(uid: str, mac: str, port: str) -> str:
        if port in broken:
            raise RuntimeError(f"interface of {uid} has another MAC")
        return "ksv000000000001"

    def lost() -> list[tuple[str, str]]:
        return [(p.name, p.port_id) for p in published[-1].pods] \
            if published else []
    api.put_podport(podport_of("a", "node-1", "p2"))
    api.put_podport(podport_of("b", "node-1", "q1"))
    stopping = threading.Event()
    try:
        PodPortFollower(api.client(), "node-1", repoint, backoff_max=0.5,
                        lost=LostPods(published.append)).start(stopping)
        wait_for(lambda: lost() == [("a", "p2")])
        assert published[-1].count == 1
        assert "uid-a has another MAC" in published[-1].pods[0].why
        api.put_podport(podport_of("b", "node-1", "q2"))
        wait_for(lambda: lost() == [("a", "p2"), ("b", "q2")])
        broken.discard("q2")        # pointed at once the MAC agrees
        api.put_podport(podport_of("b", "node-1", "q2"))
        wait_for(lambda: lost() == [("a", "p2")])
        api.client().podports.delete("a", namespace="ns")      # the pod is gone
        wait_for(lambda: published[-1].count == 0)
        assert lost() == []
    finally:
        stopping.set()


def test_a_long_node_name_labels_within_63_characters() -> None:
    long = "node-" + "x" * 100
    value = podport.node_label(long)
    assert len(value) <= 63 and value != podport.node_label(long + "y")
    assert podport.node_label("node-1") == "node-1"
