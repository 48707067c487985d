"""The informer (the list+watch loop): its steps with a scripted source,
and end to end against the fake API over HTTP."""
from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.health.checks.kubernetes import K8sApiCheck
from kuryr_supervisor.kubernetes.informer import Informer
from kuryr_supervisor.kubernetes.registry import Pod, PodRegistry
from kuryr_supervisor.kubernetes.wire import K8sGone, K8sTemporary, WatchEvent
from tests.fixtures.fakeapi import FakeAPI


def pod(name: str, uid: str = "u") -> Pod:
    return Pod("ns", name, uid)


class ListSink:
    def __init__(self, fail_on: str = "") -> None:
        self.pods: dict[str, Pod] = {}
        self.fail_on = fail_on
        self.lists = 0

    def replace_all(self, pods: Iterable[Pod], resource_version: str) -> None:
        self.pods = {p.name: p for p in pods}
        self.lists += 1

    def upsert(self, p: Pod) -> None:
        if p.name == self.fail_on:
            raise RuntimeError("boom")
        self.pods[p.name] = p

    def delete(self, p: Pod) -> None:
        self.pods.pop(p.name, None)


class ScriptedStream:
    def __init__(self, items: list[WatchEvent | Exception | float]) -> None:
        self.items = items
        self.closed = False

    def __iter__(self) -> Iterator[WatchEvent]:
        for item in self.items:
            if isinstance(item, float):
                time.sleep(item)
            elif isinstance(item, Exception):
                raise item
            else:
                yield item

    def close(self) -> None:
        self.closed = True


class ScriptedSource:
    def __init__(self, lists: list[tuple[list[Pod], str] | Exception],
                 watches: list[ScriptedStream | Exception]) -> None:
        self.lists, self.watches = lists, watches
        self.watched_from: list[str] = []
        self.listed_at: list[str] = []

    def list(self, resource_version: str = "") -> tuple[list[Pod], str]:
        self.listed_at.append(resource_version)
        item = self.lists.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def watch(self, resource_version: str) -> ScriptedStream:
        self.watched_from.append(resource_version)
        item = self.watches.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


def ev(kind: str, name: str | None, rv: str) -> WatchEvent:
    return WatchEvent(kind, pod(name) if name else None, rv)


def test_list_then_watch_from_its_version() -> None:
    synced: list[bool] = []
    source = ScriptedSource([([pod("a")], "10")], [ScriptedStream([
        ev("ADDED", "b", "11"), ev("BOOKMARK", None, "15"),
        ev("DELETED", "a", "16")])])
    sink = ListSink()
    watch = Informer(source, sink, on_synced=lambda: synced.append(True))
    stop = threading.Event()
    assert watch.step(stop) == 0.0 and watch.synced and synced == [True]
    assert watch.resource_version == "10"
    assert watch.step(stop) == 0.0
    assert source.watched_from == ["10"]
    assert set(sink.pods) == {"b"}
    assert watch.resource_version == "16"


def test_bad_object_is_skipped_and_version_moves_on() -> None:
    source = ScriptedSource([([], "1")], [ScriptedStream([
        ev("ADDED", "bad", "2"), ev("ADDED", "good", "3")])])
    sink = ListSink(fail_on="bad")
    watch = Informer(source, sink)
    stop = threading.Event()
    watch.step(stop)
    watch.step(stop)
    assert set(sink.pods) == {"good"} and watch.resource_version == "3"


class RawSink:
    """A sink of raw JSON, as the NodeNetwork records' are."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def replace_all(self, objs: Iterable[dict[str, Any]], rv: str) -> None:
        self.names = [o["metadata"]["name"] for o in objs]

    def upsert(self, obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"] == "bad":
            raise ValueError("not a record")
        self.names.append(obj["metadata"]["name"])

    def delete(self, obj: dict[str, Any]) -> None:
        self.names.remove(obj["metadata"]["name"])


def test_a_bad_object_of_any_type_is_skipped_and_named(
        caplog: pytest.LogCaptureFixture) -> None:
    """Raw JSON as well as decoded pods: the object the sink refused is
    named in the log (namespace/name from its metadata), the loop goes
    on and the version moves."""
    def raw(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "ns"}}
    source = ScriptedSource([([], "1")], [ScriptedStream([  # type: ignore[list-item]
        WatchEvent("ADDED", raw("bad"), "2"),
        WatchEvent("ADDED", raw("good"), "3")])])
    sink = RawSink()
    watch = Informer(source, sink, what="NodeNetwork")  # type: ignore[arg-type]
    stop = threading.Event()
    watch.step(stop)
    with caplog.at_level(logging.ERROR):
        assert watch.step(stop) == 0.0
    assert sink.names == ["good"] and watch.resource_version == "3"
    assert watch.failures == 0
    assert "skipping ADDED event of NodeNetwork ns/bad" in caplog.text


def test_gone_relists_soon_from_the_cache() -> None:
    source = ScriptedSource([([], "1"), ([pod("x")], "50")],
                            [ScriptedStream([ev("ADDED", "a", "7"),
                                             K8sGone("old", 410)])])
    sink = ListSink()
    watch = Informer(source, sink, backoff_initial=0.5)
    stop = threading.Event()
    watch.step(stop)
    assert 0.0 <= watch.step(stop) <= 0.5 and watch.resource_version is None
    watch.step(stop)
    assert sink.lists == 2 and watch.resource_version == "50"
    # First list: any version from the watch cache; the relist: from the
    # cache too, but not older than the last version seen (7).
    assert source.listed_at == ["0", "7"]


def test_a_list_refused_with_410_falls_back_to_a_consistent_read() -> None:
    source = ScriptedSource([([], "5"), K8sGone("expired", 410), ([], "90")],
                            [K8sGone("old", 410)])
    watch = Informer(source, ListSink())
    stop = threading.Event()
    watch.step(stop)                     # list at "0"
    watch.step(stop)                     # watch: 410
    watch.step(stop)                     # relist NotOlderThan 5: 410
    watch.step(stop)                     # consistent read
    assert source.listed_at == ["0", "5", ""]
    assert watch.resource_version == "90"


def test_without_cache_relists_every_list_is_consistent() -> None:
    source = ScriptedSource([([], "5"), ([], "6")], [K8sGone("old", 410)])
    watch = Informer(source, ListSink(), cache_relist=False)
    stop = threading.Event()
    for _ in range(3):
        watch.step(stop)
    assert source.listed_at == ["", ""]


class Upper:
    """No jitter: every random draw is the top of its range."""

    def uniform(self, low: float, high: float) -> float:
        return high


def test_relists_and_errors_are_reported_by_kind() -> None:
    relists: list[int] = []
    errors: list[str] = []
    source = ScriptedSource(
        [([], "1"), K8sTemporary("down"), ([], "2")],
        [K8sGone("old", 410)])
    watch = Informer(source, ListSink(), on_relist=lambda: relists.append(1),
                     on_error=errors.append)
    stop = threading.Event()
    for _ in range(4):
        watch.step(stop)
    assert len(relists) == 2 and errors == ["gone", "temporary"]


def test_errors_back_off_exponentially_up_to_the_cap() -> None:
    errors: list[tuple[list[Pod], str] | Exception] = [
        K8sTemporary("down") for _ in range(6)]
    source = ScriptedSource(errors + [([], "1")], [])
    watch = Informer(source, ListSink(), backoff_initial=0.5, backoff_max=4,
                     rng=Upper())  # type: ignore[arg-type]
    stop = threading.Event()
    delays = [watch.step(stop) for _ in range(6)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert watch.step(stop) == 0.0 and watch.failures == 0


def test_every_backoff_has_jitter() -> None:
    """Watchers that fail together do not retry together: each delay is
    drawn from [half, all] of the exponential step."""
    caps = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    seen: list[list[float]] = []
    for seed in range(20):
        source = ScriptedSource([K8sTemporary("down") for _ in range(6)], [])
        watch = Informer(source, ListSink(), backoff_initial=0.5,
                         backoff_max=4, rng=random.Random(seed))
        stop = threading.Event()
        delays = [watch.step(stop) for _ in range(6)]
        assert all(cap / 2 <= d <= cap for d, cap in zip(delays, caps,
                                                         strict=True))
        seen.append(delays)
    assert len({round(sum(d), 6) for d in seen}) == 20    # all different


def test_heartbeats_while_the_watch_is_idle() -> None:
    beats: list[float] = []
    source = ScriptedSource([([], "1")], [ScriptedStream([
        1.0, ev("ADDED", "a", "2")])])
    watch = Informer(source, ListSink(), heartbeat=lambda: beats.append(1),
                     heartbeat_interval=0.1)
    stop = threading.Event()
    watch.step(stop)
    watch.step(stop)
    assert len(beats) >= 7


def test_a_stalled_stream_is_abandoned() -> None:
    source = ScriptedSource([([], "1")], [ScriptedStream([30.0])])
    watch = Informer(source, ListSink(), heartbeat_interval=0.05,
                     stall_timeout=0.3)
    stop = threading.Event()
    watch.step(stop)
    started = time.monotonic()
    assert watch.step(stop) > 0
    assert time.monotonic() - started < 2


def test_beats_while_a_watch_request_is_unanswered() -> None:
    """An API server that accepts the watch and never answers: the loop
    beats on while the request waits, gives it up at the stall timeout,
    and the stream opened late is closed, never read."""
    answered = threading.Event()
    late = ScriptedStream([ev("ADDED", "a", "2")])

    class Hung(ScriptedSource):
        def watch(self, resource_version: str) -> ScriptedStream:
            answered.wait(10)
            return late

    beats: list[float] = []
    watch = Informer(Hung([([], "1")], []), ListSink(),
                     heartbeat=lambda: beats.append(time.monotonic()),
                     heartbeat_interval=0.05, stall_timeout=0.5)
    stop = threading.Event()
    watch.step(stop)
    started = time.monotonic()
    assert watch.step(stop) > 0                 # stalled: backs off
    assert time.monotonic() - started < 2
    gaps = [b - a for a, b in zip(beats, beats[1:], strict=False)]
    assert len(beats) >= 8 and max(gaps) < 0.3, gaps
    answered.set()
    eventually(lambda: late.closed, 2)
    assert watch.resource_version == "1"


def test_wait_beats_and_stops() -> None:
    beats: list[int] = []
    watch = Informer(ScriptedSource([], []), ListSink(),
                     heartbeat=lambda: beats.append(1), heartbeat_interval=0.05)
    stop = threading.Event()
    watch.wait(0.3, stop)
    assert 4 <= len(beats) <= 9
    stop.set()
    started = time.monotonic()
    watch.wait(10, stop)
    assert time.monotonic() - started < 0.1


# -- end to end over HTTP ----------------------------------------------------


class Running:
    """An informer of this node's pods into a real registry, run in a thread against FakeAPI."""

    def __init__(self, api: FakeAPI, tmp: Path, **kw: object) -> None:
        self.client = api.client("node-a", request_timeout=1, watch_timeout=2)
        self.registry = PodRegistry(str(tmp / "pods.sqlite"))
        self.beats = 0
        self.stop = threading.Event()

        def beat() -> None:
            self.beats += 1
        self.watch = Informer(self.client.node_pods,
                              _RegistrySink(self.registry),
                              heartbeat=beat, heartbeat_interval=0.05,
                              backoff_initial=0.1, backoff_max=0.4,
                              stall_timeout=10, **kw)  # type: ignore[arg-type]
        self.thread = threading.Thread(target=self.watch.run,
                                       args=(self.stop,), daemon=True)

    def __enter__(self) -> Running:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)
        assert not self.thread.is_alive()

    def names(self) -> set[str]:
        return {p.name for p in PodRegistry(self.registry.path).all()}


class _RegistrySink:
    def __init__(self, registry: PodRegistry) -> None:
        self.registry = registry

    def replace_all(self, pods: Iterable[Pod], resource_version: str) -> None:
        self.registry.replace_all(pods, resource_version)

    def upsert(self, p: Pod) -> None:
        self.registry.upsert(p)

    def delete(self, p: Pod) -> None:
        self.registry.delete(p.namespace, p.name)


def eventually(cond: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.02)


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    yield fake
    fake.stop()


def test_synced_with_only_this_nodes_pods(api: FakeAPI, tmp_path: Path) -> None:
    for i in range(5):
        api.add_pod("ns", f"a{i}", "node-a")
        api.add_pod("ns", f"b{i}", "node-b")
    with Running(api, tmp_path) as run:
        eventually(lambda: run.watch.synced)
        assert run.names() == {f"a{i}" for i in range(5)}
        assert PodRegistry(run.registry.path).synced()


def test_events_are_reflected(api: FakeAPI, tmp_path: Path) -> None:
    api.add_pod("ns", "old", "node-a")
    with Running(api, tmp_path) as run:
        eventually(lambda: run.watch.synced)
        api.add_pod("ns", "new", "node-a")
        api.add_pod("ns", "other", "node-b")
        api.modify_pod("ns", "old", deletionTimestamp="2026-11-21T00:00:00Z")
        eventually(lambda: run.names() == {"old", "new"})
        reader = PodRegistry(run.registry.path)
        eventually(lambda: (reader.get("ns", "old") or Pod("", "", "")
                            ).deletion_timestamp == "2026-11-21T00:00:00Z")
        api.delete_pod("ns", "old")
        eventually(lambda: run.names() == {"new"})


def test_dropped_watch_resumes_from_last_version(api: FakeAPI,
                                                 tmp_path: Path) -> None:
    with Running(api, tmp_path) as run:
        eventually(lambda: run.watch.synced)
        api.add_pod("ns", "p1", "node-a")
        eventually(lambda: run.names() == {"p1"})
        last = run.watch.resource_version
        api.drop_watches()
        api.add_pod("ns", "p2", "node-a")
        eventually(lambda: run.names() == {"p1", "p2"})
        assert last in [q["resourceVersion"] for q in
                        api.requests_for("/api/v1/pods", watch="true")[1:]]
        assert len(api.requests_for("/api/v1/pods", watch=None)) == 1  # no relist


def test_gone_relists(api: FakeAPI, tmp_path: Path) -> None:
    with Running(api, tmp_path) as run:
        eventually(lambda: run.watch.synced)
        api.drop_watches()
        api.add_pod("ns", "missed", "node-a")
        api.compact()
        eventually(lambda: run.names() == {"missed"})
        lists = [q for q in api.requests_for("/api/v1/pods")
                 if "watch" not in q]
        assert len(lists) == 2


def test_outage_backs_off_and_readiness_follows(api: FakeAPI,
                                                tmp_path: Path) -> None:
    check = K8sApiCheck(lambda: k8s_probe(api), interval=0)
    with Running(api, tmp_path) as run:
        eventually(lambda: run.watch.synced)
        assert check.run(time.monotonic()).ok
        api.fail(500)
        before = len(api.requests)
        time.sleep(2.0)
        calls = len(api.requests) - before
        assert calls <= 10, f"{calls} requests in 2 s: a hot loop"
        assert not check.run(time.monotonic()).ok
        beats = run.beats
        time.sleep(0.3)
        assert run.beats > beats        # still alive: heartbeats go on
        api.fail(None)
        api.add_pod("ns", "after", "node-a")
        eventually(lambda: run.names() == {"after"})
        assert check.run(time.monotonic()).ok
        assert run.watch.failures == 0


def k8s_probe(api: FakeAPI) -> tuple[bool, str]:
    ok, msg = api.client().probe(timeout=1)
    return ok, msg


def test_empty_watches_that_end_at_once_are_not_a_hot_loop() -> None:
    source = ScriptedSource([([], "1")], [ScriptedStream([])])
    watch = Informer(source, ListSink(), backoff_initial=0.5)
    stop = threading.Event()
    watch.step(stop)
    assert 0.25 <= watch.step(stop) <= 0.5 and watch.failures == 0
