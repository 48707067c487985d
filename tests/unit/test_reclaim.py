"""Reclaiming leaked allocations (the same path as CNI GC)."""
from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterator
from pathlib import Path

import pytest

from kuryr_supervisor.cni.ipam import IpamStore, PodRef
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes.reclaim import AllocationLike, Reclaimer
from kuryr_supervisor.kubernetes.registry import Pod, PodRefLike, PodRegistry
from kuryr_supervisor.workers.watcher import confirm_gone
from tests.fixtures.fakeapi import FakeAPI


@dataclasses.dataclass(frozen=True)
class Alloc:
    container_id: str
    ifname: str = "eth0"
    netns: str = ""
    pod: PodRef | None = None


class Store:
    def __init__(self, *allocs: Alloc, fail_on: str = "") -> None:
        self.allocs = list(allocs)
        self.fail_on = fail_on

    def list(self) -> list[Alloc]:
        return list(self.allocs)

    def release(self, alloc: AllocationLike) -> None:
        if alloc.container_id == self.fail_on:
            raise OSError("busy")
        self.allocs = [a for a in self.allocs if a != alloc]


def registry_of(*pods: Pod) -> dict[tuple[str, str], Pod]:
    return {(p.namespace, p.name): p for p in pods}


def test_kubernetes_mode_releases_pods_gone_from_the_registry() -> None:
    known = registry_of(Pod("ns", "alive", "u1"), Pod("ns", "reborn", "NEW"))
    store = Store(Alloc("c1", pod=PodRef("ns", "alive", "u1")),
                  Alloc("c2", pod=PodRef("ns", "deleted", "u2")),
                  Alloc("c3", pod=PodRef("ns", "reborn", "OLD")),
                  Alloc("c4", pod=PodRef("ns", "alive", "")))
    reclaimer = Reclaimer(store.list, store.release,
                          lookup_pod=lambda ns, n: known.get((ns, n)))
    released = reclaimer.reconcile()
    assert [a.container_id for a in released] == ["c2", "c3"]
    assert [a.container_id for a in store.allocs] == ["c1", "c4"]


def test_the_api_is_asked_before_releasing() -> None:
    store = Store(Alloc("c1", pod=PodRef("ns", "just-started", "u")))
    reclaimer = Reclaimer(store.list, store.release,
                          lookup_pod=lambda ns, n: None,
                          confirm_gone=lambda ref: False)
    assert reclaimer.reconcile() == [] and len(store.allocs) == 1


def test_standalone_releases_allocations_whose_netns_is_gone(
        tmp_path: Path) -> None:
    alive = tmp_path / "alive"
    alive.touch()
    store = Store(Alloc("c1", netns=str(alive)),
                  Alloc("c2", netns=str(tmp_path / "gone")),
                  Alloc("c3", netns=""))
    released = Reclaimer(store.list, store.release).reconcile()
    assert [a.container_id for a in released] == ["c2"]


def test_podless_allocations_in_kubernetes_mode_use_the_netns(
        tmp_path: Path) -> None:
    store = Store(Alloc("c1", netns=str(tmp_path / "gone"),
                        pod=PodRef("", "", "")))
    reclaimer = Reclaimer(store.list, store.release,
                          lookup_pod=lambda ns, n: None)
    assert [a.container_id for a in reclaimer.reconcile()] == ["c1"]


def test_one_failure_never_stops_the_pass(tmp_path: Path) -> None:
    store = Store(Alloc("c1", netns=str(tmp_path / "x")),
                  Alloc("c2", netns=str(tmp_path / "y")), fail_on="c1")
    assert [a.container_id for a in
            Reclaimer(store.list, store.release).reconcile()] == ["c2"]

    def broken() -> list[Alloc]:
        raise OSError("db locked")
    assert Reclaimer(broken, store.release).reconcile() == []


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    yield fake
    fake.stop()


def test_pod_deleted_in_the_api_has_its_allocation_released(
        api: FakeAPI, tmp_path: Path) -> None:
    """A real IpamStore, a real registry, the fake API over HTTP."""
    client = api.client("node-a")
    store = IpamStore(str(tmp_path / "ipam.sqlite"),
                      ipaddress.IPv4Network("10.9.0.0/24"))
    registry = PodRegistry(str(tmp_path / "pods.sqlite"))
    for name in ("keep", "doomed"):
        uid = api.add_pod("ns", name, "node-a")["metadata"]["uid"]
        store.allocate(f"cid-{name}", "eth0", netns="/proc/1/ns/net",
                       pod=PodRef("ns", name, uid))
    registry.replace_all(client.node_pods.list()[0])

    def release(alloc: AllocationLike) -> None:
        store.release(alloc.container_id, alloc.ifname)
    reclaimer = Reclaimer(store.list, release, lookup_pod=registry.get,
                          confirm_gone=confirm_gone(client))
    assert reclaimer.reconcile() == []
    api.delete_pod("ns", "doomed")
    registry.delete("ns", "doomed")
    released = reclaimer.reconcile()
    assert [a.container_id for a in released] == ["cid-doomed"]
    assert [a.container_id for a in store.list()] == ["cid-keep"]


def test_an_unreachable_api_postpones_the_pass() -> None:
    asked: list[str] = []

    def down(ref: PodRefLike) -> bool:
        asked.append(ref.name)
        raise k8s.K8sTemporary("timed out")
    beats: list[int] = []
    store = Store(Alloc("c1", pod=PodRef("ns", "a", "u")),
                  Alloc("c2", pod=PodRef("ns", "b", "u")))
    reclaimer = Reclaimer(store.list, store.release,
                          lookup_pod=lambda ns, n: None, confirm_gone=down,
                          heartbeat=lambda: beats.append(1))
    assert reclaimer.reconcile() == []
    assert asked == ["a"] and len(store.allocs) == 2 and beats == [1]
