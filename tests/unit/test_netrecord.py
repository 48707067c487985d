"""The node's record writer against the fake API over real HTTP, on a fake
clock: what it writes, when, and how few writes that is; and the release
an uninstall makes."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from kuryr_supervisor.netcheck.codecs import conditions as nc
from kuryr_supervisor.netcheck.codecs import record as nn
from kuryr_supervisor.netcheck.node.netrecord import NOT_INSTALLED_RETRY, RecordWriter, release
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.netjudge import Clock

NODE = "node-a"


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    fake.add_node(NODE)
    yield fake
    fake.stop()


class Node:
    """A node's writer with a report the test changes."""

    def __init__(self, api: FakeAPI) -> None:
        self.api = api
        self.clock = Clock()
        self.report = nn.NetworkReport(nn.Daemon(True, 1.7e9, "live, ready"),
                                       (nn.LocalCheck("ovsdb", True, "0 ms"),))
        self.counts: list[bool] = []
        self.writer = RecordWriter(
            api.client(NODE), NODE, lambda: self.report,
            heartbeat=lambda: 60.0, min_interval=lambda: 2.0,
            counted=self.counts.append, clock=self.clock,
            wall=lambda: 1.7e9 + self.clock.now)

    def writes(self) -> int:
        """API writes of NodeNetworks so far (by the fake's access log)."""
        return sum(1 for _, method, path, _ in self.api.access
                   if method != "GET" and "/nodenetworks" in path)

    def run(self, seconds: float, step: float = 0.5) -> None:
        end = self.clock.now + seconds
        while self.clock.now < end:
            self.writer.step()
            self.clock.now += step

    def record(self) -> nn.Record:
        return nn.from_object(self.api.nodenetworks[NODE])


def test_first_write_creates_the_record_owned_by_its_node(api: FakeAPI) -> None:
    node = Node(api)
    assert node.writer.step()
    obj = api.nodenetworks[NODE]
    owner = obj["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == (
        "Node", api.nodes[NODE]["metadata"]["uid"])
    assert node.record().report == node.report
    assert node.writes() == 2 and node.counts == [True]    # POST, PUT status


def test_steady_state_is_one_write_a_minute(api: FakeAPI) -> None:
    node = Node(api)
    node.run(3600)
    # the creation, then one status write per heartbeat for an hour
    assert node.writes() == 1 + 60
    reads = sum(1 for _, m, p, _ in api.access if m == "GET")
    assert reads == 2                     # the first look: record, Node


def test_a_change_is_written_at_once_but_folded_when_it_flaps(api: FakeAPI) -> None:
    node = Node(api)
    node.run(10)
    before = node.writes()
    bad = nn.NetworkReport(node.report.daemon,
                           (nn.LocalCheck("ovsdb", False, "unusable"),))
    good = node.report
    for i in range(20):                     # flapping every 0.5 s for 10 s
        node.report = bad if i % 2 == 0 else good
        node.run(0.5)
    assert 1 <= node.writes() - before <= 10 / 2.0 + 1
    node.report = bad
    node.run(3)
    assert not node.record().report.checks[0].ok


def test_messages_and_latencies_wait_for_the_heartbeat(api: FakeAPI) -> None:
    node = Node(api)
    node.run(1)
    before = node.writes()
    for ms in range(50):
        node.report = nn.NetworkReport(node.report.daemon, (
            nn.LocalCheck("ovsdb", True, f"{ms} ms"),))
        node.run(1)
    assert node.writes() == before          # 50 s: no heartbeat due yet
    node.run(15)
    assert node.writes() == before + 1
    assert node.record().report.checks[0].message.endswith(" ms")


def test_a_record_changed_or_deleted_meanwhile_is_read_again(api: FakeAPI) -> None:
    node = Node(api)
    node.run(1)
    api.put_nodenetwork(NODE, {"heartbeatSeconds": 5})  # someone wrote
    node.clock.now += 60
    assert node.writer.step()
    assert node.record().heartbeat_seconds == 60
    api.delete_nodenetwork(NODE)                        # someone deleted
    node.clock.now += 60
    assert node.writer.step()
    assert node.record().report == node.report
    assert node.counts == [True] * 3


def test_without_the_crd_it_says_so_once_and_asks_rarely(
        api: FakeAPI, caplog: pytest.LogCaptureFixture) -> None:
    api.serves_nodenetworks = False
    node = Node(api)
    with caplog.at_level(logging.INFO):
        node.run(NOT_INSTALLED_RETRY - 1)
    said = [r for r in caplog.records if "does not serve" in r.getMessage()]
    assert len(said) == 1 and node.counts == [False]
    api.serves_nodenetworks = True
    node.run(2)
    assert node.counts == [False, True] and NODE in api.nodenetworks


def test_an_api_outage_is_retried_with_backoff(api: FakeAPI) -> None:
    node = Node(api)
    node.run(1)
    api.fail(503)
    node.clock.now += 60
    node.run(120, step=0.5)
    failed = node.counts.count(False)
    assert 3 <= failed <= 10                # 4, 8, 16, 32, 60, 60 s apart
    api.fail(None)
    node.run(61)
    assert node.counts[-1] is True


def test_release_deletes_the_record_and_our_conditions(api: FakeAPI) -> None:
    node = Node(api)
    node.run(1)
    api.set_node_condition(NODE, {"type": nc.DEFAULT_TYPE, "status": "False",
                                  "reason": "KuryrPeersUnreachable"})
    api.set_node_condition(NODE, {"type": nc.NETWORK_UNAVAILABLE,
                                  "status": "True",
                                  "reason": nc.REASON_FAULT})
    assert release(api.client(NODE), NODE, nc.DEFAULT_TYPE)
    assert NODE not in api.nodenetworks
    assert api.condition(NODE, nc.DEFAULT_TYPE) is None
    unavailable: Any = api.condition(NODE, nc.NETWORK_UNAVAILABLE)
    assert (unavailable["status"], unavailable["reason"]) == (
        "False", nc.REASON_RELEASED)


def test_release_leaves_another_writers_condition(api: FakeAPI) -> None:
    api.set_node_condition(NODE, {"type": nc.NETWORK_UNAVAILABLE,
                                  "status": "True", "reason": "NoRouteCreated"})
    assert release(api.client(NODE), NODE, nc.DEFAULT_TYPE)
    unavailable: Any = api.condition(NODE, nc.NETWORK_UNAVAILABLE)
    assert unavailable["reason"] == "NoRouteCreated"
    assert unavailable["status"] == "True"
