"""The generic client: a Resource's paths, the verbs over real HTTP against
the fake API, and a Listing's pages decoded one at a time."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes import nodenetwork, podport
from kuryr_supervisor.kubernetes.listing import Listing
from kuryr_supervisor.kubernetes.resource import (
    EVENTS,
    LEASES,
    NODES,
    PODS,
    STRATEGIC_MERGE_PATCH,
    Resource,
)
from kuryr_supervisor.netcheck.codecs import record
from tests.fixtures.fakeapi import FakeAPI


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    fake.add_node("node-a", "10.0.3.0/24")
    yield fake
    fake.stop()


def test_paths_of_core_group_namespaced_and_cluster_scoped() -> None:
    assert PODS.path() == "/api/v1/pods"
    assert PODS.path(namespace="ns") == "/api/v1/namespaces/ns/pods"
    assert PODS.path("p", namespace="ns") == "/api/v1/namespaces/ns/pods/p"
    assert NODES.path("n", subresource="status") == "/api/v1/nodes/n/status"
    assert LEASES.path("l", namespace="kube-system") == \
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l"
    assert podport.RESOURCE.path("p", namespace="ns", subresource="status") \
        == "/apis/kuryr-supervisor.openstack.org/v1/namespaces/ns/podports/p/status"
    assert nodenetwork.RESOURCE.path() == \
        "/apis/kuryr-supervisor.openstack.org/v1/nodenetworks"
    assert (PODS.api_version, LEASES.api_version, EVENTS.kind) == \
        ("v1", "coordination.k8s.io/v1", "Event")


def test_a_name_never_reaches_another_path() -> None:
    assert PODS.path("../../nodes/n", namespace="a/b") == \
        "/api/v1/namespaces/a%2Fb/pods/..%2F..%2Fnodes%2Fn"


@pytest.mark.parametrize(("resource", "kwargs"), [
    (PODS, {"name": "p"}),                          # no namespace
    (NODES, {"name": "n", "namespace": "ns"}),      # not namespaced
    (NODES, {"subresource": "status"}),             # whose status?
])
def test_a_path_that_names_nothing_is_refused(resource: Resource,
                                              kwargs: Any) -> None:
    with pytest.raises(ValueError):
        resource.path(**kwargs)


def test_get_create_replace_status_delete(api: FakeAPI) -> None:
    records = api.client().nodenetworks
    assert records.get("node-a") is None                 # 404: None
    made = records.create(record.body("node-a", ""))
    with pytest.raises(k8s.K8sPermanent) as info:
        records.create(record.body("node-a", ""))
    assert info.value.status == 409
    written = records.replace_status("node-a", dict(made, status={"x": 1}))
    assert written["status"] == {"x": 1}
    assert records.replace("node-a", dict(written, spec={"y": 2}))["spec"] \
        == {"y": 2}
    assert records.delete("node-a") is True
    assert records.delete("node-a") is False             # 404: False
    assert [m for _, m, p, _ in api.requests if "nodenetworks" in p] == [
        "GET", "POST", "POST", "PUT", "PUT", "DELETE", "DELETE"]


def test_a_strategic_merge_patch_of_a_subresource(api: FakeAPI) -> None:
    nodes = api.client().nodes
    out = nodes.patch("node-a", {"status": {"conditions": [
        {"type": "A", "status": "True"}]}}, subresource="status",
        content_type=STRATEGIC_MERGE_PATCH)
    assert api.condition("node-a", "A") == {"type": "A", "status": "True"}
    assert out["metadata"]["name"] == "node-a"


def test_page_asks_as_the_reflector_does(api: FakeAPI) -> None:
    for i in range(3):
        api.add_pod("ns", f"p{i}", "node-a")
    pods = api.client().pods
    first = pods.page(limit=2, resource_version="0",
                      field_selector="spec.nodeName=node-a")
    assert len(first.items) == 2 and first.token and first.resource_version
    rest = pods.page(limit=2, token=first.token,
                     field_selector="spec.nodeName=node-a")
    assert len(rest.items) == 1 and not rest.token
    pods.page(resource_version="7", label_selector="app=x")
    assert [{k: v for k, v in q.items() if k != "continue"}
            for q in api.requests_for("/api/v1/pods")] == [
        {"fieldSelector": "spec.nodeName=node-a", "limit": "2",
         "resourceVersion": "0"},
        {"fieldSelector": "spec.nodeName=node-a", "limit": "2"},
        {"labelSelector": "app=x", "resourceVersion": "7",
         "resourceVersionMatch": "NotOlderThan"}]


def test_watch_bounded_by_the_server_with_or_without_bookmarks(
        api: FakeAPI) -> None:
    client = api.client(watch_timeout=1)
    rv = client.pods.page().resource_version
    stream = client.pods.watch(rv, dict, field_selector="spec.nodeName=node-a")
    api.add_pod("ns", "p", "node-a")
    api.add_pod("ns", "elsewhere", "node-b")
    events = list(stream)           # the server ends it after 1 s
    assert [(e.type, e.obj and e.obj["metadata"]["name"]) for e in events
            if e.type != "BOOKMARK"] == [("ADDED", "p")]
    list(client.pods.watch(rv, dict, namespace="ns", bookmarks=False,
                           field_selector="metadata.name=p", timeout=0.2))
    watches = [q for _, _, p, q in api.requests if q.get("watch") == "true"]
    assert watches[0]["timeoutSeconds"] == "1"
    assert watches[0]["allowWatchBookmarks"] == "true"
    assert watches[1]["timeoutSeconds"] == "1"          # rounded up
    assert "allowWatchBookmarks" not in watches[1]


def test_a_listing_decodes_each_page_before_reading_the_next(
        api: FakeAPI) -> None:
    """What keeps 10,000 pods from existing at once as JSON: a page is
    decoded, and the loop beats, before the next page is asked for."""
    for i in range(5):
        api.add_pod("ns", f"p{i}", "node-a")
    asked: list[int] = []
    beats: list[int] = []

    def decode(obj: Any) -> str:
        asked.append(len(api.requests_for("/api/v1/pods")))
        return str(obj["metadata"]["name"])

    listing = Listing(api.client().pods, decode, page_size=2,
                      beat=lambda: beats.append(len(asked)))
    names, rv = listing.list("0")
    assert list(names) == [f"p{i}" for i in range(5)] and rv
    assert asked == [1, 1, 2, 2, 3] and beats == [2, 4]


def test_a_listing_watches_what_it_lists(api: FakeAPI) -> None:
    listing = Listing(api.client().pods, lambda o: o["metadata"]["name"],
                      field_selector="spec.nodeName=node-a")
    _, rv = listing.list()
    stream = listing.watch(rv)
    seen: list[str] = []

    def read() -> None:
        for event in stream:
            if event.type == "ADDED":
                seen.append(event.obj)
                return
    reader = threading.Thread(target=read)
    reader.start()
    api.add_pod("ns", "other", "node-b")
    api.add_pod("ns", "mine", "node-a")
    reader.join(5)
    stream.close()
    assert seen == ["mine"]
