"""The Kubernetes adapter against a fake API over real HTTP."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from oslo_config import cfg

from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes import nodes
from kuryr_supervisor.kubernetes.resource import getter
from tests.fixtures.fakeapi import FakeAPI, kubernetes_conf


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    fake.add_node("node-a", pod_cidr="10.0.3.0/24")
    yield fake
    fake.stop()


def make_conf(**opts: object) -> cfg.ConfigOpts:
    conf: cfg.ConfigOpts = kubernetes_conf(**opts)
    return conf


def client_for(api: FakeAPI, node: str = "node-a", **kw: object
               ) -> k8s.K8sClient:
    conf = make_conf(api_root=api.url, node_name=node, **kw)
    return k8s.K8sClient.from_conf(conf, environ={})


def test_standalone_without_any_api_configured() -> None:
    assert not k8s.is_configured(make_conf(), environ={})
    assert k8s.is_configured(make_conf(), environ={
        "KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert k8s.is_configured(make_conf(api_root="http://x"), environ={})
    assert k8s.is_configured(make_conf(kubeconfig="/k"), environ={})


def test_node_name_precedence() -> None:
    env = {"KURYR_NODE_NAME": "kuryr", "NODE_NAME": "plain"}
    assert k8s.node_name(make_conf(node_name="opt"), env) == "opt"
    assert k8s.node_name(make_conf(), env) == "kuryr"
    assert k8s.node_name(make_conf(), {"NODE_NAME": "plain"}) == "plain"
    assert k8s.node_name(make_conf(), {})     # the hostname


def test_in_cluster_without_service_account_is_permanent() -> None:
    with pytest.raises(k8s.K8sPermanent) as info:
        k8s.make_endpoint(make_conf(), environ={})
    assert info.value.__cause__ is not None


def test_token_file_is_reread(api: FakeAPI, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    client = client_for(api, token_file=str(token))
    client.node_pods.list()
    token.write_text("two\n")
    client.node_pods.list()
    assert api.auth[-2:] == ["Bearer one", "Bearer two"]


def test_kubeconfig(api: FakeAPI, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""
apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{api.url}"}}}}]
users: [{{name: u, user: {{token: sekret}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    conf = make_conf(kubeconfig=str(kubeconfig), node_name="node-a")
    client = k8s.K8sClient.from_conf(conf, environ={})
    assert client.node_pods.list() == ([], str(api.rv))
    assert api.auth[-1] == "Bearer sekret"


def test_list_only_this_nodes_pods(api: FakeAPI) -> None:
    mine = api.add_pod("ns", "mine", "node-a")
    api.add_pod("ns", "theirs", "node-b")
    pods, rv = client_for(api).node_pods.list()
    assert [(p.namespace, p.name, p.uid) for p in pods] == [
        ("ns", "mine", mine["metadata"]["uid"])]
    assert rv == str(api.rv)
    assert api.requests_for("/api/v1/pods")[-1]["fieldSelector"] == \
        "spec.nodeName=node-a"


def test_watch_is_bounded_and_resumes(api: FakeAPI) -> None:
    client = client_for(api, watch_timeout=1)
    _, rv = client.node_pods.list()
    api.add_pod("ns", "p1", "node-a")
    api.add_pod("ns", "elsewhere", "node-b")
    api.modify_pod("ns", "p1", deletionTimestamp="2026-01-01T00:00:00Z")
    api.delete_pod("ns", "p1")
    started = time.monotonic()
    events = list(client.node_pods.watch(rv))
    assert time.monotonic() - started < 3       # timeoutSeconds honoured
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert events[1].obj and events[1].obj.deletion_timestamp
    query = api.requests_for("/api/v1/pods", watch="true")[-1]
    assert query["resourceVersion"] == rv
    assert query["allowWatchBookmarks"] == "true"
    assert query["timeoutSeconds"] == "1"


def test_watch_bookmarks() -> None:
    api = FakeAPI(bookmark_interval=0.2).start()
    try:
        client = client_for(api, watch_timeout=1)
        _, rv = client.node_pods.list()
        events = list(client.node_pods.watch(rv))
        assert events and all(e.type == "BOOKMARK" and e.obj is None
                              for e in events)
    finally:
        api.stop()


def test_watch_close_from_another_thread(api: FakeAPI) -> None:
    client = client_for(api, watch_timeout=30)
    stream = client.node_pods.watch(client.node_pods.list()[1])
    threading.Timer(0.3, stream.close).start()
    started = time.monotonic()
    assert list(stream) == []
    assert time.monotonic() - started < 5


def test_error_taxonomy(api: FakeAPI) -> None:
    client = client_for(api)
    api.fail(500)
    with pytest.raises(k8s.K8sTemporary):
        client.node_pods.list()
    api.fail(403)
    with pytest.raises(k8s.K8sPermanent) as info:
        client.nodes.get(client.node)
    assert info.value.status == 403
    api.fail(None)
    api.add_pod("ns", "p", "node-a")
    api.compact()
    with pytest.raises(k8s.K8sGone):
        list(client.node_pods.watch("1"))
    api.stop()
    with pytest.raises(k8s.K8sTemporary) as info2:
        client.node_pods.list()
    assert info2.value.__cause__ is not None


def test_get_pod_and_node(api: FakeAPI) -> None:
    client = client_for(api)
    obj = api.add_pod("ns", "p", "node-a")
    get_pod = getter(client.pods, k8s.pod_from_json)
    pod = get_pod("ns", "p")
    assert pod is not None and pod.uid == obj["metadata"]["uid"]
    assert get_pod("ns", "missing") is None
    assert get_pod("ns", "../../nodes/node-a") is None   # quoted
    assert nodes.pod_cidr(client.nodes.get(client.node)) == "10.0.3.0/24"
    assert nodes.pod_cidr(client.nodes.get("missing")) is None


def test_patch_node_condition_merges_by_type(api: FakeAPI) -> None:
    client = client_for(api)
    patch = nodes.condition_setter(client.nodes, client.node)
    patch({"type": "KuryrCNIHealthy", "status": "True"})
    patch({"type": "KuryrCNIHealthy", "status": "False"})
    conds = api.nodes["node-a"]["status"]["conditions"]
    assert conds == [{"type": "KuryrCNIHealthy", "status": "False"}]


def test_probe_readyz_then_healthz() -> None:
    api = FakeAPI(readyz=False).start()
    try:
        ok, msg = client_for(api).probe(timeout=1)
        assert ok and "/healthz" in msg
        api.has_readyz = True
        assert client_for(api).probe(timeout=1) == (True, "/readyz ok")
        api.fail(500)
        ok, msg = client_for(api).probe(timeout=1)
        assert not ok and "500" in msg
    finally:
        api.stop()


def test_probe_unreachable_is_quick() -> None:
    api = FakeAPI().start()
    url = api.url
    api.stop()
    conf = make_conf(api_root=url, node_name="n")
    client = k8s.K8sClient.from_conf(conf, environ={})
    started = time.monotonic()
    ok, _ = client.probe(timeout=1)
    assert not ok and time.monotonic() - started < 2


def test_list_versions_pick_who_serves_it(api: FakeAPI) -> None:
    """"" a consistent read, "0" any cached version, a seen version: the
    cache, not older than it (the parameters the API server reads)."""
    client = client_for(api)
    client.node_pods.list()
    client.node_pods.list("0")
    client.node_pods.list("7")
    lists = [q for q in api.requests_for("/api/v1/pods") if "watch" not in q]
    assert [(q.get("resourceVersion"), q.get("resourceVersionMatch"))
            for q in lists] == [(None, None), ("0", None), ("7", "NotOlderThan")]
