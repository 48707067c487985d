"""The controller role's manifests (etc/kubernetes/controller): schema-valid
(the kubernetes client's models refuse unknown fields), consistent with the
daemon's configuration, and granting exactly the API calls the controller
makes."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from oslo_config import cfg

from kuryr_supervisor import conf as conf_pkg
from kuryr_supervisor.controller.leadership.announcer import SUFFIX, CreateLease
from kuryr_supervisor.kubernetes.lease import LeaderElector
from tests.fixtures import kustomize
from tests.fixtures.fakeapi import FakeAPI

pytestmark = pytest.mark.manifests

HERE = Path(__file__).parents[2] / "etc" / "kubernetes" / "controller"


def documents() -> list[dict[str, Any]]:
    """As ``kubectl kustomize etc/kubernetes/controller`` renders them."""
    return kustomize.build(HERE)


def by_kind(kind: str, name: str = "") -> dict[str, Any]:
    (doc,) = [d for d in documents() if d["kind"] == kind and
              (not name or d["metadata"]["name"] == name)]
    return doc


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((HERE / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(
        p.name for p in HERE.glob("*.yaml") if p.name != "kustomization.yaml")


def test_every_document_matches_the_api_schema() -> None:
    kinds = []
    for doc in documents():
        kinds.append(doc["kind"])
        getattr(kubernetes.client, f"V1{doc['kind']}").model_validate(doc)
        assert doc["metadata"].get("namespace", "kube-system") == "kube-system"
    assert sorted(kinds) == sorted([
        "CustomResourceDefinition", "CustomResourceDefinition",
        "ServiceAccount", "ClusterRole",
        "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "Secret",
        "Deployment"])


def test_podport_crd_matches_the_code() -> None:
    """The CRD names what the code calls, and its structural schema's
    patterns accept what the controller writes and refuse the forgeries
    the CNI role refuses by format."""
    import re

    from kuryr_supervisor.kubernetes import podport
    crd = by_kind("CustomResourceDefinition",
                  f"{podport.PLURAL}.{podport.GROUP}")
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{podport.PLURAL}.{podport.GROUP}"
    assert (spec["group"], spec["names"]["kind"], spec["names"]["plural"],
            spec["scope"]) == (podport.GROUP, podport.KIND, podport.PLURAL,
                               "Namespaced")
    [version] = spec["versions"]
    assert version["name"] == podport.VERSION and version["storage"]
    props = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert sorted(props["required"]) == sorted(props["properties"])

    def ok(field: str, value: str) -> bool:
        return bool(re.search(props["properties"][field]["pattern"], value))
    assert ok("address", "10.20.0.12/24") and ok("gateway", "10.20.0.1")
    assert ok("mac", "fa:16:3e:00:00:01")
    for bad in ("10.20.0.12/0", "10.20.0.12/1", "10.20.0.12", "300.1.1.1/24",
                "10.20.0.12/31"):
        assert not ok("address", bad), bad
    for bad in ("01:00:5e:00:00:01", "FA:16:3E:00:00:01", "fa:16:3e:00:00"):
        assert not ok("mac", bad), bad
    # no label aggregates it into the tenants' edit/admin roles
    assert not any("aggregate" in k for k in crd["metadata"].get("labels", {}))


def test_nodenetwork_crd_matches_the_code() -> None:
    """The CRD names what the code calls, is cluster-scoped with a status
    subresource, and its schema takes a record the node writes (every
    field, at the code's bounds) and refuses more peers than the judge
    reads."""
    from kuryr_supervisor.kubernetes import nodenetwork as crd_name
    from kuryr_supervisor.netcheck.codecs import record as nn
    crd = by_kind("CustomResourceDefinition",
                  f"{crd_name.PLURAL}.{crd_name.GROUP}")
    spec = crd["spec"]
    assert (spec["group"], spec["names"]["kind"], spec["names"]["plural"],
            spec["scope"]) == (crd_name.GROUP, crd_name.KIND, crd_name.PLURAL,
                               "Cluster")
    [version] = spec["versions"]
    assert version["name"] == crd_name.VERSION and version["subresources"] == {
        "status": {}}
    schema = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    report = nn.NetworkReport(
        nn.Daemon(True, 1.7e9, "x" * 1000),
        tuple(nn.LocalCheck(f"c{i}", True, "m" * 1000)
              for i in range(nn.MAX_CHECKS)),
        nn.Probe("", "a" * 100, True, 1.5),
        tuple(nn.Probe(f"n{i}", "a" * 100, False)
              for i in range(nn.MAX_PEERS)),
        nn.Canary("a" * 100, "b" * 100), True,
        service=nn.Probe("", "a" * 100, False, 1.5), node_port_wanted=True)
    status = nn.status(report, heartbeat_seconds=3600, wall=1.7e9)
    assert set(status) == set(schema["properties"])

    def fits(value: Any, rule: dict[str, Any], where: str) -> None:
        kind = rule["type"]
        assert isinstance(value, {"object": dict, "array": list,
                                  "string": str, "boolean": bool,
                                  "integer": int, "number": (int, float)}[
                                      kind]), where
        if kind == "object":
            assert set(rule.get("required", [])) <= set(value), where
            for key, item in value.items():
                fits(item, rule["properties"][key], f"{where}.{key}")
        elif kind == "array":
            assert len(value) <= rule["maxItems"], where
            for i, item in enumerate(value):
                fits(item, rule["items"], f"{where}[{i}]")
        elif kind == "string":
            assert len(value) <= rule["maxLength"], where
        elif kind == "integer" or "minimum" in rule:
            assert rule["minimum"] <= value <= rule["maximum"], where
    fits(status, schema, "status")
    assert schema["properties"]["peers"]["maxItems"] == nn.MAX_PEERS
    assert schema["properties"]["checks"]["maxItems"] == nn.MAX_CHECKS
    assert not any("aggregate" in k for k in crd["metadata"].get("labels", {}))
    # The spec the controller writes (the canary, the node's share of the
    # probing, the judge's verdict), every field at the code's bounds.
    import ipaddress

    from kuryr_supervisor.netcheck.codecs import canaryspec as cs
    from kuryr_supervisor.netcheck.codecs import clusterspec
    from kuryr_supervisor.netcheck.codecs import conditions as nc
    from kuryr_supervisor.state.netverdicts import KINDS
    canary = cs.spec("n" * 253, cs.Assignment(
        cs.CanaryPort("p" * nn.MAX_ID, "fa:16:3e:00:00:05",
                      ipaddress.IPv4Interface("10.0.0.5/24"),
                      ipaddress.IPv4Address("10.0.0.1")),
        tuple(cs.Target(f"{i:03d}".ljust(253, "x"),
                        ipaddress.IPv4Address("10.0.0.9"))
              for i in range(nn.MAX_PEERS)), cs.MAX_INTERVAL))
    longest = max(KINDS, key=len).ljust(63, "x")
    spec = clusterspec.merged(canary, "n" * 253, clusterspec.ClusterVerdict(
        longest, nn.rfc3339(4e9), clusterspec.NodeVerdict(
            max(nc.CAUSES, key=len), "m" * 300, nn.rfc3339(4e9)),
        "j" * 300, nn.rfc3339(4e9), clusterspec.MAX_LIFETIME,
        "5e1b6f0c-0000-4000-8000-000000000001"))
    from kuryr_supervisor.netcheck.codecs import servicespec
    spec = servicespec.merged(spec, "n" * 253, servicespec.ServiceTarget(
        ipaddress.IPv4Address("255.255.255.254"), 65535))
    from kuryr_supervisor.netcheck.codecs import nodeportspec
    spec = nodeportspec.merged(spec, "n" * 253, nodeportspec.NodePort(
        "p" * 64, "fa:16:3e:00:00:06",
        ipaddress.IPv4Interface("255.255.255.253/24"),
        ipaddress.IPv4Address("255.255.255.1")))
    assert clusterspec.verdict({"metadata": {
        "uid": "5e1b6f0c-0000-4000-8000-000000000001"}, "spec": spec},
        "n" * 253).fault == longest
    rule = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(spec) == set(rule["properties"])
    assert set(spec["cluster"]) == set(
        rule["properties"]["cluster"]["properties"])
    fits(spec, rule, "spec")
    probe = rule["properties"]["probe"]["properties"]
    assert probe["peers"]["maxItems"] == nn.MAX_PEERS
    assert (probe["intervalSeconds"]["minimum"],
            probe["intervalSeconds"]["maximum"]) == (cs.MIN_INTERVAL,
                                                     cs.MAX_INTERVAL)


def test_the_network_judge_runs_as_shipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped controller runs the network_health and network_canary
    handlers beside neutron_port, with their entry points installed."""
    from kuryr_supervisor.controller import handlers
    conf = controller_conf(monkeypatch)
    assert conf.controller.handlers == ["neutron_port", "network_health",
                                        "network_canary"]
    assert handlers.missing(conf.controller.handlers) == []


def container() -> dict[str, Any]:
    spec = by_kind("Deployment")["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    return c


def controller_conf(monkeypatch: pytest.MonkeyPatch) -> cfg.ConfigOpts:
    """The Deployment's command line over the ConfigMap and Secret files."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # in a pod
    files = {"/etc/kuryr-supervisor/kuryr-supervisor.conf":
             by_kind("ConfigMap")["data"]["kuryr-supervisor.conf"],
             "/etc/kuryr-supervisor-credentials/neutron.conf":
             by_kind("Secret")["stringData"]["neutron.conf"]}
    args = container()["command"][1:]
    conf = cfg.ConfigOpts()
    conf_pkg.register_opts(conf)
    with tempfile.TemporaryDirectory() as tmp:
        for i, arg in enumerate(args):
            if arg in files:
                path = os.path.join(tmp, f"{i}.conf")
                Path(path).write_text(files[arg])
                args[i] = path
        conf(args, default_config_files=[])
        conf_pkg.validate(conf)
    return conf


def test_the_octavia_component_adds_the_services_handler(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As shipped the controller runs no services handler (a cloud may
    have no Octavia); the octavia component adds it to the shipped ones,
    with its service subnet, a valid configuration with every entry point
    installed."""
    from kuryr_supervisor.controller import handlers
    assert "services" not in controller_conf(monkeypatch).controller.handlers
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(HERE, tmp_path)],
        "components": [os.path.relpath(HERE.parent / "components" / "octavia",
                                       tmp_path)]}))
    docs = kustomize.build(tmp_path)
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    for env in c["env"]:
        if env["name"].startswith("OS_"):
            monkeypatch.setenv(env["name"], env["value"])
    conf = controller_conf(monkeypatch)
    assert conf.controller.handlers == ["neutron_port", "network_health",
                                        "network_canary", "services"]
    assert conf.services.service_subnet_id == "REPLACE-WITH-SERVICE-SUBNET-ID"
    assert handlers.missing(conf.controller.handlers) == []


def test_command_and_config_make_a_valid_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    conf = controller_conf(monkeypatch)
    assert conf.role == "controller"
    assert conf.controller.leader_election is True
    assert by_kind("Deployment")["spec"]["replicas"] > 1
    port = conf.cni_health_server.port
    assert port != 8090                   # the CNI daemon's, on the same host
    for probe, path in (("startupProbe", "/startup"), ("livenessProbe", "/alive"),
                        ("readinessProbe", "/ready")):
        get = container()[probe]["httpGet"]
        assert (get["path"], get["port"], get["host"]) == (
            path, port, conf.cni_health_server.host)
    grace = by_kind("Deployment")["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"]
    assert grace > conf.supervisor.graceful_shutdown_timeout


def test_credentials_are_not_in_the_configmap() -> None:
    text = by_kind("ConfigMap")["data"]["kuryr-supervisor.conf"]
    assert "password" not in text and "[neutron]" not in text


def test_unprivileged() -> None:
    sc = container()["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["allowPrivilegeEscalation"] is False


def test_runs_as_an_unprivileged_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    """A high uid and group, never root; the state directory made by the
    daemon below a memory-backed emptyDir (a tmpfs root is root's, 1777:
    accepted above the state directory, refused as the state directory);
    the credentials as the kubelet writes them with fsGroup (root's,
    defaultMode plus group read) private to the daemon's uid."""
    from kuryr_supervisor.conf import secretfiles
    spec = by_kind("Deployment")["spec"]["template"]["spec"]
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True
    assert pod["runAsUser"] >= 10000 and pod["runAsGroup"] >= 10000
    assert pod["fsGroup"] == pod["runAsGroup"]
    assert "runAsUser" not in container()["securityContext"]
    state_dir = controller_conf(monkeypatch).ipam.state_dir
    mounts = {m["mountPath"]: m["name"] for m in container()["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    volume = volumes[mounts[os.path.dirname(state_dir)]]
    assert volume["emptyDir"]["medium"] == "Memory"
    secret_mode = volumes["credentials"]["secret"]["defaultMode"] | 0o440
    as_mounted = os.stat_result((0o100000 | secret_mode, 0, 0, 1, 0,
                                 pod["fsGroup"], 0, 0, 0, 0))
    assert secretfiles.problems(as_mounted, pod["runAsUser"],
                                {pod["runAsGroup"], pod["fsGroup"]}) == []


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    fake.add_pod("ns", "p", "node-a")
    yield fake
    fake.stop()


def used_permissions(api: FakeAPI) -> set[tuple[str, str, str]]:
    """Make every call the controller makes; (group, resource, verb)."""
    client = api.client("node-a", watch_timeout=1)
    from kuryr_supervisor.kubernetes.clusterpods import ClusterPods
    pods = ClusterPods(client)
    _, rv = pods.list()
    list(pods.watch(rv))
    uid = api.pods[("ns", "p")]["metadata"]["uid"]
    client.namespaces.get("kube-system")
    from kuryr_supervisor.kubernetes import podport
    from kuryr_supervisor.kubernetes.portdata import PortData
    data = PortData.from_mapping({
        "portId": "p1", "podUid": uid, "mac": "fa:16:3e:00:00:01",
        "address": "10.0.0.5/24", "gateway": "10.0.0.1"})
    obj = podport.body("ns", "p", data)
    client.podports.create(obj, namespace="ns")
    client.podports.page(limit=10)
    current = client.podports.get("p", namespace="ns")
    assert current is not None
    obj["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    client.podports.replace("p", obj, namespace="ns")
    client.podports.patch("p", {"status": {"portStatus": "ACTIVE"}},
                          namespace="ns", subresource="status")
    from kuryr_supervisor.controller.ports.report import pod_event
    client.events.create(pod_event(uid, "ns", "p", "PortLost", "gone"),
                         namespace="ns")
    client.podports.delete("p", namespace="ns", uid=current["metadata"]["uid"])
    client.probe_watch(1)
    client.probe(1)
    elector = LeaderElector(client, namespace="kube-system",
                            name="kuryr-supervisor-controller",
                            identity="x", duration=5)
    elector.try_acquire_or_renew()
    elector.try_acquire_or_renew()
    creates = CreateLease(client, namespace="kube-system",
                          name="kuryr-supervisor-controller" + SUFFIX,
                          identity="x")
    creates.inherited()
    creates.cover({"uid-1": 10.0})
    creates.cover({"uid-1": 10.0, "uid-2": 100.0})
    network_judge(api, client)
    network_canary(client)
    services_handler(api, client)
    canary_service(client)
    policy_handler(api, client)
    used = set()
    verbs = {"GET": "get", "PATCH": "patch", "POST": "create", "PUT": "update",
             "DELETE": "delete"}
    for _, method, path, query in api.requests:
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "v1"] and parts[2:] == ["pods"]:
            used.add(("", "pods", "watch" if query.get("watch") else "list"))
        elif parts == ["api", "v1", "namespaces"]:
            used.add(("", "namespaces",
                      "watch" if query.get("watch") else "list"))
        elif parts == ["apis", "networking.k8s.io", "v1", "networkpolicies"]:
            used.add(("networking.k8s.io", "networkpolicies",
                      "watch" if query.get("watch") else "list"))
        elif parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 4:
            used.add(("", "namespaces", verbs[method]))
        elif parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
            used.add(("", "pods", verbs[method]))
        elif parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "events":
            used.add(("", "events", verbs[method]))
        elif parts[:2] == ["api", "v1"] and parts[2:3] == ["nodes"]:
            used.add(("", "nodes/status" if parts[-1] == "status" else
                      "nodes", ("watch" if query.get("watch") else "list")
                      if len(parts) == 3 else verbs[method]))
        elif parts[:4] == ["apis", "kuryr-supervisor.openstack.org", "v1",
                           "nodenetworks"] and len(parts) == 4:
            assert method == "GET", (method, path)
            used.add(("kuryr-supervisor.openstack.org", "nodenetworks",
                      "watch" if query.get("watch") else "list"))
        elif parts[:4] == ["apis", "kuryr-supervisor.openstack.org", "v1",
                           "nodenetworks"]:
            assert method == "PUT" and len(parts) == 5, (method, path)
            used.add(("kuryr-supervisor.openstack.org", "nodenetworks",
                      "update"))
        elif parts[:2] == ["apis", "kuryr-supervisor.openstack.org"] and \
                parts[-1] == "status":
            used.add(("kuryr-supervisor.openstack.org", "podports/status",
                      verbs[method]))
        elif parts[:2] == ["apis", "kuryr-supervisor.openstack.org"]:
            used.add(("kuryr-supervisor.openstack.org", "podports",
                      "list" if method == "GET" and parts[-1] == "podports"
                      else verbs[method]))
        elif parts[:2] == ["apis", "coordination.k8s.io"]:
            used.add(("coordination.k8s.io", "leases", verbs[method]))
        elif path == "/api/v1/services":
            used.add(("", "services", "watch" if query.get("watch")
                      else "list"))
        elif parts[:3] == ["api", "v1", "namespaces"] and \
                parts[4] == "services":
            used.add(("", "services", verbs[method]))
        elif path == "/apis/discovery.k8s.io/v1/endpointslices":
            used.add(("discovery.k8s.io", "endpointslices",
                      "watch" if query.get("watch") else "list"))
        elif parts[:4] == ["apis", "discovery.k8s.io", "v1", "namespaces"]:
            used.add(("discovery.k8s.io", "endpointslices", verbs[method]))
        elif path not in ("/readyz", "/healthz"):
            raise AssertionError(f"unexpected request {method} {path}")
    return used


def network_judge(api: FakeAPI, client: Any) -> None:
    """What the network_health handler calls: its start (Nodes listed),
    the records' list and watch, a judgement that marks a node (a Node
    read again after a conflict, its status patched), the Events (created,
    then patched when they repeat) and the release on uninstall."""
    import multiprocessing
    import threading

    from kuryr_supervisor.controller.runtime import HandlerContext, Runtime
    from kuryr_supervisor.kubernetes import events
    from kuryr_supervisor.netcheck.codecs import record as nn
    from kuryr_supervisor.netcheck.judge import assembly
    from kuryr_supervisor.netcheck.judge.records import RecordSource
    from kuryr_supervisor.state import SharedState
    for node in ("node-a", "node-b", "node-c"):
        api.add_node(node)
        api.put_nodenetwork(node, nn.status(nn.NetworkReport(
            nn.Daemon(True, 0.0), (nn.LocalCheck("ovsdb", node != "node-a"),)),
            heartbeat_seconds=60, wall=1.7e9))
    conf = cfg.ConfigOpts()
    conf_pkg.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override("fault_after", 0.0, "network_health")
    clock = [100.0]
    handler = assembly.judge(Runtime(
        HandlerContext(conf, SharedState.create(
            multiprocessing.get_context("fork")), lambda ready: None),
        kubernetes=client), clock=lambda: clock[0])
    assert handler.start(threading.Event())
    source = RecordSource(client)
    handler.book.replace_all(*source.list())
    list(client.nodenetworks.watch(api.rv, dict))
    api.set_node_condition("node-a", {"type": "Other", "status": "True"})
    handler.judge(clock[0])                  # node-a: conflict, read, patch
    handler.stop()
    assert api.condition("node-a", "KuryrNetworkHealthy") is not None
    recorder = events.recorder(client)
    for _ in range(2):
        recorder.send(events.Note("Warning", "NodeNetworkFault", "x",
                                  subject=events.Subject("Node", "node-a")))
    handler.release_all()


def services_handler(api: FakeAPI, client: Any) -> None:
    """What the services handler calls: the Services' and the
    EndpointSlices' list and watch, a Service read before its load
    balancer is swept, Events on Services (as every handler's)."""
    from kuryr_supervisor.controller.services.cluster import Cluster
    from kuryr_supervisor.kubernetes.services import EndpointSlices, Services
    api.add_service("ns", "web", "10.96.0.10", ports=[{"port": 80}])
    for source in (Services(client), EndpointSlices(client)):
        _, rv = source.list()
        list(source.watch(rv))
    assert Cluster(client).gone("uid-1", "ns/web")


def policy_handler(api: FakeAPI, client: Any) -> None:
    """What the network_policy handler calls: the NetworkPolicies', the
    namespaces', the pods' and the Nodes' list and watch (as its sources
    make them), Events on NetworkPolicies."""
    from kuryr_supervisor.controller.policy.handler import PolicyHandler
    api.put_networkpolicy("ns", "deny", {"podSelector": {}})
    handler = PolicyHandler.__new__(PolicyHandler)
    handler.client, handler._beat = client, lambda: None
    for kind in ("NetworkPolicy", "Namespace", "Pod", "Node"):
        source = handler._source(kind)
        _, rv = source.list()
        list(source.watch(rv))
    client.events.create({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "deny.1", "namespace": "ns"},
        "involvedObject": {"apiVersion": "networking.k8s.io/v1",
                           "kind": "NetworkPolicy", "name": "deny",
                           "namespace": "ns"},
        "reason": "PolicyApplied", "message": "applied", "type": "Normal",
        "source": {"component": "kuryr-supervisor"}}, namespace="ns")


def network_canary(client: Any) -> None:
    """What the network_canary handler calls besides the records' list and
    watch (the judge's): a record's spec replaced."""
    from kuryr_supervisor.netcheck.codecs import canaryspec
    from kuryr_supervisor.netcheck.judge.records import RecordSource
    items, _ = RecordSource(client).list()
    obj = dict(items[0])
    obj["spec"] = canaryspec.spec(obj["metadata"]["name"],
                                  canaryspec.Assignment())
    client.nodenetworks.replace(obj["metadata"]["name"], obj)


def canary_service(client: Any) -> None:
    """What the network_canary handler calls for the canary Service (with
    the services handler): the Service and its EndpointSlice read, made,
    replaced (its port changed) and deleted (uninstalling)."""
    import ipaddress

    from kuryr_supervisor.netcheck.judge.canaryservice import CanaryService
    port = [8094]
    service = CanaryService(client, port=lambda: port[0])
    canaries = {"node-a": ipaddress.IPv4Address("10.0.0.5")}
    assert service.sync(canaries) is not None
    port[0] = 8095
    service.refresh()
    assert service.sync(canaries) is not None
    assert service.release()


def test_rbac_grants_exactly_what_is_used(api: FakeAPI) -> None:
    granted = set()
    for kind in ("ClusterRole", "Role"):
        for rule in by_kind(kind)["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"]
            for group in rule["apiGroups"]:
                granted |= {(group, r, v) for r in rule["resources"]
                            for v in rule["verbs"]}
    assert granted == used_permissions(api)
    lease_rules = by_kind("Role")["rules"]
    named = [r for r in lease_rules if "update" in r["verbs"]]
    # The election's Lease and the creates Lease, by name, and no other.
    leases = {p.strip("/").split("/")[-1] for _, m, p, _ in api.requests
              if "/leases/" in p}
    assert set(named[0]["resourceNames"]) == leases == {
        "kuryr-supervisor-controller", "kuryr-supervisor-controller-creates"}
    opts = {o.name: o.default for o in conf_pkg.controller.OPTS}
    assert opts["lease_name"] == "kuryr-supervisor-controller"


def test_bindings_tie_together() -> None:
    sa = by_kind("ServiceAccount")["metadata"]
    subject = {"kind": "ServiceAccount", "name": sa["name"],
               "namespace": sa["namespace"]}
    for binding, role in (("ClusterRoleBinding", "ClusterRole"),
                          ("RoleBinding", "Role")):
        assert by_kind(binding)["subjects"] == [subject]
        assert by_kind(binding)["roleRef"]["name"] == by_kind(role)["metadata"]["name"]
    spec = by_kind("Deployment")["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == sa["name"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["config"]["configMap"]["name"] == by_kind("ConfigMap")["metadata"]["name"]
    assert volumes["credentials"]["secret"]["secretName"] == \
        by_kind("Secret")["metadata"]["name"]
