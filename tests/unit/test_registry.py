"""The on-disk pod registry and the Server's pod check."""
from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from pathlib import Path

import pytest

from kuryr_supervisor import errors
from kuryr_supervisor.cni.ipam import PodRef
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes.registry import Pod, PodChecker, PodRegistry, registry_path
from kuryr_supervisor.kubernetes.resource import getter
from tests.fixtures.fakeapi import FakeAPI


@pytest.fixture
def registry(tmp_path: Path) -> PodRegistry:
    return PodRegistry(str(tmp_path / "state" / "pods.sqlite"))


def test_crud(registry: PodRegistry) -> None:
    assert registry.all() == [] and not registry.synced()
    registry.upsert(Pod("ns", "a", "u1"))
    registry.upsert(Pod("ns", "a", "u2", "2026-01-01T00:00:00Z"))
    assert registry.get("ns", "a") == Pod("ns", "a", "u2",
                                          "2026-01-01T00:00:00Z")
    registry.delete("ns", "a")
    registry.delete("ns", "a")             # idempotent
    assert registry.get("ns", "a") is None


def test_replace_all_swaps_and_marks_synced(registry: PodRegistry) -> None:
    registry.upsert(Pod("ns", "stale", "u"))
    registry.replace_all([Pod("ns", "b", "2"), Pod("ns", "a", "1")], "42")
    assert [p.name for p in registry.all()] == ["a", "b"]
    assert registry.synced()


def _write(path: str) -> None:
    PodRegistry(path).replace_all([Pod("ns", "from-child", "u")], "7")


def test_another_process_sees_the_same_registry(registry: PodRegistry) -> None:
    registry.upsert(Pod("ns", "before", "u"))     # a connection exists pre-fork
    child = multiprocessing.get_context("fork").Process(
        target=_write, args=(registry.path,))
    child.start()
    child.join(10)
    assert child.exitcode == 0
    assert [p.name for p in registry.all()] == ["from-child"]


def test_registry_path_default() -> None:
    assert registry_path("") == "/var/lib/kuryr-supervisor/pods.sqlite"
    assert registry_path("/x") == "/x/pods.sqlite"


# -- check_pod -----------------------------------------------------------------
REF = PodRef("ns", "p", "uid-1")


def test_no_check_standalone_or_before_sync(registry: PodRegistry) -> None:
    PodChecker(None).check_pod(REF)
    PodChecker(registry).check_pod(REF)         # not synced: no judgement


def test_known_pod_passes_without_asking(registry: PodRegistry) -> None:
    registry.replace_all([Pod("ns", "p", "uid-1")])
    asked: list[str] = []
    PodChecker(registry, lambda ns, n: asked.append(n)).check_pod(REF)
    PodChecker(registry).check_pod(PodRef("ns", "p", ""))   # no UID given
    assert asked == []


def test_missing_or_other_uid_is_gone(registry: PodRegistry) -> None:
    registry.replace_all([Pod("ns", "p", "uid-OLD")])
    with pytest.raises(errors.PodGone):
        PodChecker(registry).check_pod(REF)
    with pytest.raises(errors.PodGone):
        PodChecker(registry).check_pod(PodRef("ns", "absent", ""))


def test_a_lagging_registry_is_confirmed_with_the_api(
        registry: PodRegistry) -> None:
    registry.replace_all([])
    PodChecker(registry, lambda ns, n: Pod(ns, n, "uid-1")).check_pod(REF)


def test_api_errors_never_block_an_add(registry: PodRegistry) -> None:
    registry.replace_all([])

    def down(ns: str, name: str) -> Pod | None:
        raise k8s.K8sTemporary("down")
    PodChecker(registry, down).check_pod(REF)


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    yield fake
    fake.stop()


def test_check_pod_against_the_api(api: FakeAPI, registry: PodRegistry) -> None:
    client = api.client("node-a")
    real = api.add_pod("ns", "real", "node-a")["metadata"]["uid"]
    registry.replace_all([])                     # synced, but lagging
    checker = PodChecker(registry, getter(client.pods, k8s.pod_from_json))
    checker.check_pod(PodRef("ns", "real", real))
    with pytest.raises(errors.PodGone, match="gone"):
        checker.check_pod(PodRef("ns", "never-existed", "x"))
    with pytest.raises(errors.PodGone, match="UID"):
        checker.check_pod(PodRef("ns", "real", "another-uid"))
    assert errors.PodGone("x").wire.code == 103
