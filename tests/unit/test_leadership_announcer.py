"""The creates Lease (controller/leadership/announcer.py) against the Kubernetes API
fake over HTTP: what a leader announces, what a new leader inherits, and
that nothing is sent when the announcement cannot be written."""
from __future__ import annotations

import datetime
import json
from collections.abc import Iterator

import pytest

from kuryr_supervisor.controller.leadership import announcer
from kuryr_supervisor.controller.leadership.announcer import ANNOTATION, CreateLease
from kuryr_supervisor.kubernetes.client import K8sTemporary
from tests.fixtures.fakeapi import FakeAPI

KEY = ("kube-system", "ctl-creates")


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    server = FakeAPI().start()
    yield server
    server.stop()


class Clock:
    def __init__(self) -> None:
        self.now = datetime.datetime.now(datetime.UTC).timestamp()

    def __call__(self) -> float:
        return self.now


def creates(api: FakeAPI, who: str, clock: Clock) -> CreateLease:
    return CreateLease(api.client(), namespace=KEY[0], name=KEY[1],
                       identity=who, clock=clock)


def lease_writes(api: FakeAPI) -> int:
    return sum(1 for _, m, p, _ in list(api.requests)
               if m == "PUT" and p.endswith("/leases/ctl-creates")
               or m == "POST" and p.endswith("/leases"))


def until(api: FakeAPI) -> float:
    spec = api.leases[KEY]["spec"]
    renewed = datetime.datetime.fromisoformat(
        spec["renewTime"].replace("Z", "+00:00")).timestamp()
    return renewed + int(spec["leaseDurationSeconds"])


def named(api: FakeAPI) -> dict[str, float]:
    return json.loads(api.leases[KEY]["metadata"]["annotations"][ANNOTATION])


def test_announced_pods_inherited_by_the_next_leader(api: FakeAPI) -> None:
    clock = Clock()
    a = creates(api, "a_1", clock)
    assert a.inherited() == announcer.Inherited({})   # nothing yet
    a.cover({"p1": 30.0, "p2": 30.0})
    assert api.leases[KEY]["spec"]["holderIdentity"] == "a_1"
    assert set(named(api)) == {"p1", "p2"}
    assert until(api) >= clock.now + 30.0
    assert lease_writes(api) == 1
    a.cover({"p1": 20.0})                       # already said: no write
    assert lease_writes(api) == 1
    a.cover({"p1": 10.0, "p3": 60.0})           # a new pod: written
    assert lease_writes(api) == 2 and set(named(api)) == {"p1", "p3"}
    assert until(api) >= clock.now + 60.0
    # A new leader, 20 s later: p3 still in flight, p1's time is over.
    clock.now += 20.0
    b = creates(api, "b_2", clock)
    held = b.inherited()
    assert set(held.pods) == {"p3"} and held.rest == 0.0
    assert 39.0 <= held.left("p3") <= 41.0
    assert held.left("p1") == 0.0 and held.left("other") == 0.0
    b.cover({"p3": held.left("p3")})            # what it passes on
    assert lease_writes(api) == 2               # already said
    b.cover({"p3": held.left("p3"), "p4": 5.0})
    assert api.leases[KEY]["spec"]["holderIdentity"] == "b_2"
    assert set(named(api)) == {"p3", "p4"}
    clock.now += 1000.0                         # long after: nothing left
    assert creates(api, "c_3", clock).inherited().pods == {}


def test_too_many_pods_or_an_unreadable_annotation_hold_every_pod(
        api: FakeAPI) -> None:
    clock = Clock()
    a = creates(api, "a_1", clock)
    a.cover({f"p{i}": 30.0 for i in range(announcer.MOST + 1)})
    assert set(named(api)) == {announcer.EVERY}
    held = creates(api, "b_2", clock).inherited()
    assert held.pods == {} and 29.0 <= held.left("anyone") <= 31.0
    api.leases[KEY]["metadata"]["annotations"][ANNOTATION] = "[1, 2]"
    held = creates(api, "c_3", clock).inherited()
    assert 29.0 <= held.left("anyone") <= 31.0   # the Lease's own time


def test_a_write_that_fails_raises_and_is_read_again(api: FakeAPI) -> None:
    """Another writer changed the Lease (409): cover raises an outage, so
    the caller sends nothing; the next cover reads it again and writes."""
    clock = Clock()
    a = creates(api, "a_1", clock)
    a.cover({"p1": 10.0})
    creates(api, "x_9", clock).cover({"x": 100.0})     # a foreign write
    with pytest.raises(K8sTemporary) as err:
        a.cover({"p2": 20.0})
    assert "ctl-creates" in str(err.value) and err.value.status == 409
    a.cover({"p2": 20.0})
    assert api.leases[KEY]["spec"]["holderIdentity"] == "a_1"
    assert set(named(api)) == {"p2"}


def test_local_announcements_outlive_the_process_in_shared_memory() -> None:
    """Without leader election: the same announcement in the master's
    shared memory (a multiprocessing RawArray, as the daemon allocates
    it), read by the process started in place of the writer."""
    import multiprocessing

    from kuryr_supervisor.state.creates import CreatesBoard
    board = CreatesBoard.create(multiprocessing.get_context("fork"))
    clock = Clock()
    first = announcer.LocalCreates(board, clock=clock)
    assert first.inherited() == announcer.Inherited({})   # a fresh board
    first.cover({"p1": 30.0, "p2": 10.0})
    clock.now += 15.0
    held = announcer.LocalCreates(board, clock=clock).inherited()
    assert set(held.pods) == {"p1"} and 14.0 <= held.left("p1") <= 16.0
    assert held.rest == 0.0
    # A writer killed in the middle of a write: only the time is known,
    # and every pod waits until then.
    board.write(clock.now + 40.0, b'{"p3":')
    board._header[1] = -1.0
    held = announcer.LocalCreates(board, clock=clock).inherited()
    assert held.pods == {} and 39.0 <= held.left("anyone") <= 41.0
