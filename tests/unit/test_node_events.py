"""Node events: aggregation and the spam filter (pure), the recorder over real
HTTP against the fake Kubernetes API (read back with the kubernetes client),
and the source against a real SharedState changed the way the master does,
on a fake clock (the daemon's own hysteresis, no wait)."""
from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Iterator

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.health import verdictnotes
from kuryr_supervisor.health.nodeevents import NodeEventSource
from kuryr_supervisor.kubernetes import events
from kuryr_supervisor.kubernetes.events import Correlator, Note
from kuryr_supervisor.state import Component, Fault, LiveCause, Reason, SharedState
from tests.fixtures.fakeapi import FakeAPI

NODE = "node-ev"
CRASH = Note("Warning", "WorkerRestarted", "Server worker was killed", "server/signal9")


class Wall:
    """A clock that moves only when a test moves it (``now``)."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_repeats_become_one_event_with_a_count() -> None:
    wall = Wall()
    corr = Correlator(NODE, wall=wall)
    verb, body = corr.observe(CRASH)  # type: ignore[misc]
    assert verb == "create" and body["count"] == 1
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Node",
                                      "name": NODE, "uid": NODE}
    assert body["metadata"]["namespace"] == "default"
    assert body["source"]["component"] == "kuryr-supervisor"
    assert body["reportingInstance"] == f"kuryr-supervisor-{NODE}"
    corr.created(CRASH, body["metadata"]["name"])
    wall.now += 5
    other_message = Note(CRASH.type, CRASH.reason, "back after 0.2s", CRASH.key)
    verb, name, patch = corr.observe(other_message)  # type: ignore[misc]
    assert (verb, name) == ("patch", body["metadata"]["name"])
    assert patch == {"count": 2, "message": "back after 0.2s",
                     "lastTimestamp": "2027-01-15T08:00:05Z"}
    # Another worker or cause: another Event.
    verb, _ = corr.observe(Note("Warning", "WorkerRestarted", "x",  # type: ignore[misc]
                                "watcher/signal9"))
    assert verb == "create"


def test_spam_filter_keeps_counting() -> None:
    wall = Wall()
    corr = Correlator(NODE, burst=2, rate=1 / 300, wall=wall)
    first = corr.observe(CRASH)
    assert first is not None
    corr.created(CRASH, first[1]["metadata"]["name"])
    assert corr.observe(CRASH) is not None
    assert corr.observe(CRASH) is None and corr.observe(CRASH) is None
    assert corr.filtered == 2
    wall.now += 300                          # one token back
    verb, _, patch = corr.observe(CRASH)  # type: ignore[misc]
    assert verb == "patch" and patch["count"] == 5   # the filtered ones count
    assert corr.observe(CRASH) is None


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    server = FakeAPI().start()
    yield server
    server.stop()


def read_back(api: FakeAPI) -> list[object]:
    """The Events as the kubernetes client's models (strict decoding)."""
    from kubernetes import client
    configuration = client.Configuration()
    configuration.host = api.url
    with client.ApiClient(configuration) as raw:
        items: list[object] = client.CoreV1Api(raw).list_namespaced_event(
            "default").items
    return items


def test_recorder_posts_then_patches_over_http(api: FakeAPI) -> None:
    rec = events.recorder(api.client(NODE))
    for i in range(3):
        rec.send(Note(CRASH.type, CRASH.reason, f"attempt {i}", CRASH.key))
    rec.send(Note("Normal", "Ready", "kuryr-supervisor is ready"))
    assert [m for m, _ in api.event_calls] == ["POST", "PATCH", "PATCH", "POST"]
    by_reason = {e.reason: e for e in read_back(api)}  # type: ignore[attr-defined]
    crash = by_reason["WorkerRestarted"]
    assert crash.count == 3 and crash.message == "attempt 2"
    assert crash.involved_object.kind == "Node"
    assert crash.involved_object.name == NODE
    assert crash.reporting_component == "kuryr-supervisor"
    assert crash.type == "Warning" and by_reason["Ready"].type == "Normal"
    # The API expired the Event: the next repeat creates it again, counted.
    api.core_events.clear()
    rec.send(CRASH)
    (again,) = read_back(api)
    assert again.count == 4  # type: ignore[attr-defined]
    assert rec.posted == 5 and rec.failed == 0


def test_recorder_never_blocks_and_drops_when_full(api: FakeAPI) -> None:
    rec = events.recorder(api.client(NODE), queue_size=2)
    assert rec.record(CRASH) and rec.record(CRASH)
    assert rec.record(CRASH) is False and rec.dropped == 1
    api.fail(500)
    rec.send(CRASH)                        # an API failure is counted, not raised
    assert rec.failed == 1
    api.fail(None)
    rec.start()
    rec.stop(timeout=5)
    assert api.event_calls and api.event_calls[0][0] == "POST"


# -- the source ---------------------------------------------------------------
class Sink(list[Note]):
    def reasons(self) -> list[str]:
        return [n.reason for n in self]


@pytest.fixture
def clock() -> Wall:
    return Wall(1000.0)


@pytest.fixture
def setup(clock: Wall) -> tuple[SharedState, cfg.ConfigOpts, Sink]:
    state = SharedState.create(multiprocessing.get_context("fork"),
                               clock=clock)
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([])
    for comp, pid in ((Component.WATCHER, 100), (Component.SERVER, 101),
                      (Component.HEALTH, 102)):
        state.register(comp, pid)
    return state, conf, Sink()


def die(state: SharedState, comp: Component, reason: Reason, code: int) -> None:
    """What the master's dead-worker hook writes."""
    state.mark_down(comp, reason, code)
    state.count_restart(comp)
    state.record_restart_cause(comp, reason)


def test_worker_restart_named_with_its_signal(setup: tuple[SharedState, cfg.ConfigOpts, Sink]) -> None:
    state, conf, sink = setup
    source = NodeEventSource(state, conf, sink.append)
    source.poll()
    assert sink == []
    die(state, Component.SERVER, Reason.KILLED, -signal.SIGKILL)
    source.poll()
    assert sink == []                       # not back yet
    state.register(Component.SERVER, 201)
    source.poll()
    (note,) = sink
    assert note.reason == "WorkerRestarted" and note.type == "Warning"
    assert "Server worker (pid 101) was killed by signal 9 (SIGKILL)" in note.message
    assert "back as pid 201 after" in note.message and "#1" in note.message
    # The same crash again is the same Event (key); a stale kill is another.
    die(state, Component.SERVER, Reason.KILLED, -signal.SIGKILL)
    state.register(Component.SERVER, 202)
    source.poll()
    state.mark_down(Component.WATCHER, Reason.STALE)     # the governor first
    source.poll()
    die(state, Component.WATCHER, Reason.STALE, -signal.SIGKILL)
    state.register(Component.WATCHER, 203)
    source.poll()
    assert sink[1].key == note.key and "pid 202" in sink[1].message
    assert "Watcher worker (pid 100) stopped heartbeating" in sink[2].message
    assert sink[2].key != note.key
    # Shutting down: workers leave, that is no restart.
    state.set_draining()
    state.mark_down(Component.SERVER, Reason.STOPPING)
    die(state, Component.SERVER, Reason.EXITED, 0)
    source.poll()
    assert len(sink) == 3


def test_budgets_verdict_and_faults(setup: tuple[SharedState, cfg.ConfigOpts, Sink],
                                   clock: Wall) -> None:
    state, conf, sink = setup
    source = NodeEventSource(state, conf, sink.append)
    state.publish_overall(live=True, ready=False, cause=LiveCause.NONE,
                          summary="live, not ready: starting")
    source.poll()
    assert sink == []                       # starting is not news
    state.publish_overall(live=True, ready=True, cause=LiveCause.NONE,
                          summary="live, ready")
    source.poll()
    state.publish_overall(live=True, ready=False, cause=LiveCause.NONE,
                          summary="live, not ready: k8s-api: HTTP 500")
    source.poll()
    assert sink.reasons() == ["Ready"]      # not yet: hysteresis
    clock.now += verdictnotes.READY_HOLD - 0.1
    source.poll()
    assert sink.reasons() == ["Ready"]
    clock.now += 0.1
    source.poll()
    state.publish_overall(live=True, ready=True, cause=LiveCause.NONE,
                          summary="live, ready")
    source.poll()
    assert sink.reasons() == ["Ready", "NotReady", "Ready"]
    assert sink[1].message == "live, not ready: k8s-api: HTTP 500"
    assert "again after" in sink[2].message and "HTTP 500" in sink[2].message
    sink.clear()
    state.set_restart_budget_exceeded(True)
    for _ in range(conf.cni_daemon.cni_failures_count):
        state.record_cni_failure()
    state.set_fault(Fault.BRIDGE_KIND, True)
    source.poll()
    source.poll()                           # no repeat while it lasts
    assert sink.reasons() == ["RestartBudgetExhausted",
                              "CNIFailureBudgetExhausted", "EnvironmentFault"]
    assert "is not a bridge" in sink[2].message
    state.set_fault(Fault.BRIDGE_KIND, False)
    source.poll()
    assert sink.reasons()[-1] == "EnvironmentFaultCleared"


def test_a_short_unready_spell_is_not_an_event(
        setup: tuple[SharedState, cfg.ConfigOpts, Sink], clock: Wall) -> None:
    """A healed restart: readiness fails for a moment, WorkerRestarted is
    the only Event (no NotReady/Ready pair per kill)."""
    state, conf, sink = setup
    source = NodeEventSource(state, conf, sink.append)
    state.publish_overall(live=True, ready=True, cause=LiveCause.NONE,
                          summary="live, ready")
    source.poll()
    sink.clear()
    for n in range(5):
        die(state, Component.SERVER, Reason.KILLED, -signal.SIGKILL)
        state.publish_overall(live=True, ready=False, cause=LiveCause.NONE,
                              summary="live, not ready: server not running")
        source.poll()
        clock.now += verdictnotes.READY_HOLD / 2     # a slow restart
        state.register(Component.SERVER, 300 + n)
        state.publish_overall(live=True, ready=True, cause=LiveCause.NONE,
                              summary="live, ready")
        source.poll()
    assert sink.reasons() == ["WorkerRestarted"] * 5
    assert len({note.key for note in sink}) == 1        # one aggregated Event
    state.publish_overall(live=True, ready=False, cause=LiveCause.NONE,
                          summary="live, not ready: k8s-api down")
    source.poll()
    clock.now += verdictnotes.READY_HOLD
    source.poll()
    assert sink.reasons()[-1] == "NotReady"
