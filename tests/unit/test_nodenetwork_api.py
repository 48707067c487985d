"""NodeNetworks and Node conditions through the real client over real HTTP
against the fake API, which must keep the real one's semantics for them:
the status subresource apart from the object, resourceVersion and 409 on a
stale one, list in pages and watch, 404 without the CRD; Node conditions
merged by type, removed with ``$patch: delete``, conditional on the Node's
resourceVersion. Plus the record's own format and checks."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes.nodes import patch_conditions
from kuryr_supervisor.netcheck.codecs import record as nn
from tests.fixtures.fakeapi import FakeAPI


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    fake.add_node("node-a")
    fake.add_node("node-b")
    yield fake
    fake.stop()


def report(ready: bool = True) -> nn.NetworkReport:
    return nn.NetworkReport(
        nn.Daemon(ready, 1.7e9, "live, ready"),
        (nn.LocalCheck("ovsdb", True, "OVSDB answers"),
         nn.LocalCheck("ovn-controller", False, "not connected")),
        nn.Probe("", "10.0.0.1", True, 0.4),
        (nn.Probe("node-b", "10.0.0.7", False),),
        nn.Canary("10.0.0.5", "a1b2"))


def test_status_is_a_subresource_apart_from_the_object(api: FakeAPI) -> None:
    client = api.client()
    body = nn.body("node-a", api.nodes["node-a"]["metadata"]["uid"])
    body["status"] = {"ignored": True}
    made = client.nodenetworks.create(body)
    assert "status" not in made                 # create drops the status
    assert made["metadata"]["ownerReferences"][0]["kind"] == "Node"
    with pytest.raises(k8s.K8sPermanent) as exc:
        client.nodenetworks.create(nn.body("node-a", ""))
    assert exc.value.status == 409
    made["status"] = nn.status(report(), heartbeat_seconds=60, wall=1.7e9)
    written = client.nodenetworks.replace_status("node-a", made)
    assert written["metadata"]["resourceVersion"] != \
        made["metadata"]["resourceVersion"]
    # A stale version is refused; the write in between is kept.
    with pytest.raises(k8s.K8sPermanent) as exc:
        client.nodenetworks.replace_status("node-a", made)
    assert exc.value.status == 409
    record = nn.from_object(client.nodenetworks.get("node-a") or {})
    assert record.report == report() and record.heartbeat_seconds == 60


def test_list_in_pages_and_watch(api: FakeAPI) -> None:
    client = api.client()
    for i in range(5):
        api.put_nodenetwork(f"n{i}", {"heartbeatSeconds": 60})
    items, rv, token = client.nodenetworks.page(limit=2)
    names = [o["metadata"]["name"] for o in items]
    while token:
        page, _, token = client.nodenetworks.page(limit=2, token=token)
        names += [o["metadata"]["name"] for o in page]
    assert names == [f"n{i}" for i in range(5)]
    seen: list[tuple[str, str]] = []
    stream = client.nodenetworks.watch(rv, lambda obj: obj)

    def read() -> None:
        for event in stream:
            seen.append((event.type, event.obj["metadata"]["name"]))
            if len(seen) == 2:
                return
    reader = threading.Thread(target=read)
    reader.start()
    api.add_pod("default", "p", "node-a")       # never in this watch
    api.put_nodenetwork("n1", {"heartbeatSeconds": 30})
    api.delete_nodenetwork("n2")
    reader.join(5)
    stream.close()
    assert seen == [("MODIFIED", "n1"), ("DELETED", "n2")]


def test_without_the_crd_every_call_is_404(api: FakeAPI) -> None:
    api.serves_nodenetworks = False
    client = api.client()
    assert client.nodenetworks.get("node-a") is None
    with pytest.raises(k8s.K8sPermanent) as exc:
        client.nodenetworks.create(nn.body("node-a", ""))
    assert exc.value.status == 404


def test_node_conditions_merge_by_type_and_delete(api: FakeAPI) -> None:
    client = api.client()
    api.set_node_condition("node-a", {"type": "NetworkUnavailable",
                                      "status": "False",
                                      "reason": "RouteCreated"})
    node = client.nodes.get("node-a") or {}
    rv = node["metadata"]["resourceVersion"]
    out = patch_conditions(client.nodes, "node-a", [
        {"type": "KuryrNetworkHealthy", "status": "True",
         "reason": "KuryrNetworkHealthy"},
        {"type": "NetworkUnavailable", "status": "True"}],
        resource_version=rv)
    unavailable = api.condition("node-a", "NetworkUnavailable")
    assert unavailable == {"type": "NetworkUnavailable", "status": "True",
                           "reason": "RouteCreated"}     # merged, not replaced
    assert out["metadata"]["resourceVersion"] != rv
    with pytest.raises(k8s.K8sPermanent) as exc:       # stale: refused
        patch_conditions(client.nodes, "node-a",
                         [{"type": "X", "status": "True"}], resource_version=rv)
    assert exc.value.status == 409
    patch_conditions(client.nodes, "node-a", [{"type": "KuryrNetworkHealthy",
                                               "$patch": "delete"}])
    assert api.condition("node-a", "KuryrNetworkHealthy") is None
    assert api.condition("node-a", "NetworkUnavailable") is not None
    assert client.nodes.get("nope") is None


def test_nodes_listed_in_pages(api: FakeAPI) -> None:
    client = api.client()
    for i in range(3):
        api.add_node(f"node-x{i}")
    page, _, token = client.nodes.page(limit=2)
    names = [n["metadata"]["name"] for n in page]
    while token:
        page, _, token = client.nodes.page(limit=2, token=token)
        names += [n["metadata"]["name"] for n in page]
    assert names == sorted(["node-a", "node-b", "node-x0", "node-x1",
                            "node-x2"])


def _record(**status: Any) -> dict[str, Any]:
    obj = nn.body("node-a", "")
    obj["status"] = {**nn.status(report(), heartbeat_seconds=60, wall=1.7e9),
                     **status}
    return obj


@pytest.mark.parametrize(("change", "why"), [
    ({"heartbeatSeconds": 0}, "heartbeatSeconds"),
    ({"heartbeatSeconds": True}, "heartbeatSeconds"),
    ({"daemon": {"ready": "yes"}}, "daemon.ready"),
    ({"peers": [{"node": "NOT A NAME", "reached": True}]}, "peers[0].node"),
    ({"peers": [{"node": "b", "reached": True}] * (nn.MAX_PEERS + 1)},
     "more than 64"),
    ({"checks": [{"name": "x" * 100, "ok": True}]}, "checks[0].name"),
    ({"gateway": {"reached": True, "latencyMs": "fast"}}, "latencyMs"),
    ({"canary": "10.0.0.5"}, "canary"),
])
def test_a_record_that_does_not_hold_up_is_refused(change: dict[str, Any],
                                                  why: str) -> None:
    with pytest.raises(ValueError, match=why.replace("[", r"\[").replace(
            "]", r"\]")):
        nn.from_object(_record(**change))


def test_a_record_names_its_own_node_and_cuts_long_text() -> None:
    obj = _record()
    obj["spec"]["nodeName"] = "node-b"
    with pytest.raises(ValueError, match="nodeName"):
        nn.from_object(obj)
    long = _record(daemon={"ready": True, "summary": "x" * 10_000})
    assert len(nn.from_object(long).report.daemon.summary) == nn.MAX_TEXT


def test_the_signature_ignores_figures_and_messages() -> None:
    base = report()
    moved = nn.NetworkReport(
        nn.Daemon(True, 1.8e9, "other words"),
        (nn.LocalCheck("ovsdb", True, "other message"),
         nn.LocalCheck("ovn-controller", False, "still not connected")),
        nn.Probe("", "10.0.0.1", True, 9.9), (nn.Probe("node-b", "10.0.0.7",
                                                       False, 3.0),),
        nn.Canary("10.0.0.5", "a1b2"))
    assert moved.signature() == base.signature()
    turned = nn.NetworkReport(base.daemon, base.checks, base.gateway,
                              (nn.Probe("node-b", "10.0.0.7", True),),
                              base.canary)
    assert turned.signature() != base.signature()
