"""The Kubernetes manifests, rendered from the kustomize base: schema-valid,
consistent with the daemon's defaults, hardened, and granting exactly the
API calls the daemon makes."""
from __future__ import annotations

import configparser
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pydantic
import pytest
import yaml
from oslo_config import cfg

from kuryr_supervisor import conf as conf_pkg
from kuryr_supervisor.conf import cni_install
from kuryr_supervisor.conf import health as health_conf
from kuryr_supervisor.conf import metrics as metrics_conf
from kuryr_supervisor.conf import supervisor as supervisor_conf
from kuryr_supervisor.kubernetes import events, nodes
from kuryr_supervisor.kubernetes.resource import getter
from kuryr_supervisor.kubernetes.wire import pod_from_json
from tests.fixtures import docs, kustomize
from tests.fixtures.fakeapi import FakeAPI

pytestmark = pytest.mark.manifests

ROOT = Path(__file__).parents[2]
MANIFESTS = ROOT / "etc" / "kubernetes"
BASE = MANIFESTS / "base"
API_VERSIONS = {"ServiceAccount": "v1", "ConfigMap": "v1", "DaemonSet": "apps/v1",
                "ClusterRole": "rbac.authorization.k8s.io/v1",
                "ClusterRoleBinding": "rbac.authorization.k8s.io/v1"}


def rel(target: Path, start: Path) -> str:
    """kustomize refuses absolute paths: ``target`` relative to ``start``."""
    return os.path.relpath(target, start)


def documents() -> list[dict[str, Any]]:
    return kustomize.build(BASE)


def model(doc: dict[str, Any]) -> Any:
    """Validate against the API schema; unknown fields are refused."""
    cls = getattr(kubernetes.client, f"V1{doc['kind']}")
    return cls.model_validate(doc)


def by_kind(kind: str) -> dict[str, Any]:
    (doc,) = [d for d in documents() if d["kind"] == kind]
    return doc


def test_every_document_matches_the_api_schema() -> None:
    docs = documents()
    assert sorted(d["kind"] for d in docs) == sorted(API_VERSIONS)
    for doc in docs:
        assert doc["apiVersion"] == API_VERSIONS[doc["kind"]]
        model(doc)


def test_unknown_fields_are_refused() -> None:
    doc = by_kind("DaemonSet")
    doc["spec"]["template"]["spec"]["containers"][0]["livenessProbe"][
        "httpGet"]["hots"] = "127.0.0.1"
    with pytest.raises(pydantic.ValidationError, match="hots"):
        model(doc)


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = by_kind("DaemonSet")["spec"]["template"]["spec"]
    return spec


def default(opts: list[cfg.Opt], name: str) -> Any:
    return next(o.default for o in opts if o.name == name)


def test_probes_match_the_health_server_defaults() -> None:
    (container,) = pod_spec()["containers"]
    port = default(health_conf.SERVER_OPTS, "port")
    host = default(health_conf.SERVER_OPTS, "host")
    for probe, path in (("startupProbe", "/startup"),
                        ("livenessProbe", "/alive"),
                        ("readinessProbe", "/ready")):
        get = container[probe]["httpGet"]
        assert (get["path"], get["port"], get["host"]) == (path, port, host)


def test_grace_period_exceeds_graceful_shutdown() -> None:
    timeout = default(supervisor_conf.OPTS, "graceful_shutdown_timeout")
    configured = daemon_conf().supervisor.graceful_shutdown_timeout
    assert pod_spec()["terminationGracePeriodSeconds"] > max(timeout, configured)


def test_node_access() -> None:
    spec = pod_spec()
    (container,) = spec["containers"]
    assert spec["hostNetwork"] is True
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "spec.nodeName"
    host_paths = {v["hostPath"]["path"] for v in spec["volumes"]
                  if "hostPath" in v}
    assert host_paths == {"/opt/cni/bin", "/etc/cni/net.d", "/run/netns",
                          "/var/lib/kuryr-supervisor", "/run/kuryr-supervisor"}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["netns"]["mountPropagation"] == "HostToContainer"
    assert any(t.get("operator") == "Exists" and "key" not in t
               for t in spec["tolerations"])


def test_names_tie_together() -> None:
    sa = by_kind("ServiceAccount")["metadata"]
    binding = by_kind("ClusterRoleBinding")
    assert pod_spec()["serviceAccountName"] == sa["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"],
                                    "namespace": sa["namespace"]}]
    assert binding["roleRef"]["name"] == by_kind("ClusterRole")["metadata"]["name"]
    cm = by_kind("ConfigMap")["metadata"]["name"]
    assert {"name": "config", "configMap": {"name": cm}} in pod_spec()["volumes"]


def daemon_conf() -> cfg.ConfigOpts:
    text = by_kind("ConfigMap")["data"]["kuryr-supervisor.conf"]
    conf = cfg.ConfigOpts()
    conf_pkg.register_opts(conf)
    if "cni_install" not in conf:
        cni_install.register_opts(conf)
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as f:
        f.write(text)
        f.flush()
        conf(["--config-file", f.name], default_config_files=[])
        conf_pkg.validate(conf)
        for group, opts in conf_pkg.list_opts() + cni_install.list_opts():
            if group not in conf:   # [neutron]: registered only where used
                continue
            for opt in opts:
                getattr(conf[group], opt.dest)
    return conf


def test_configmap_is_a_valid_daemon_config() -> None:
    conf = daemon_conf()
    known = {(g, o.name) for g, opts in conf_pkg.list_opts()
             + cni_install.list_opts() for o in opts}
    parser = configparser.ConfigParser()
    parser.read_string(by_kind("ConfigMap")["data"]["kuryr-supervisor.conf"])
    for section in parser.sections():
        for key in parser[section]:
            assert (section, key) in known, f"unknown option [{section}] {key}"
    assert conf.cni_install.enabled is True
    assert conf.cni_health_server.port == 8090


# -- RBAC: exactly what is used ---------------------------------------------------
@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    fake.add_node("node-a", "10.0.0.0/24")
    fake.add_pod("ns", "p", "node-a")
    yield fake
    fake.stop()


def used_permissions(api: FakeAPI) -> set[tuple[str, str]]:
    """Call everything the daemon calls; map each request to (resource, verb)."""
    client = api.client("node-a", watch_timeout=1)
    _, rv = client.node_pods.list()
    list(client.node_pods.watch(rv))
    getter(client.pods, pod_from_json)("ns", "p")
    nodes.pod_cidr(client.nodes.get(client.node))
    nodes.condition_setter(client.nodes, client.node)(
        {"type": "KuryrCNIHealthy", "status": "True"})
    client.probe(timeout=1)
    recorder = events.recorder(client)     # node events: create, then patch
    for _ in range(2):
        recorder.send(events.Note("Normal", "Ready", "kuryr-supervisor is ready"))
    from kuryr_supervisor.kubernetes import podport
    # address_source = podport: a list of the one name, then its watch
    assert podport.waiter(client.podports)("ns", "p", "", 1) is None
    from kuryr_supervisor.kubernetes.portdata import PortData
    uid = api.pods[("ns", "p")]["metadata"]["uid"]
    api.put_podport(podport.body("ns", "p", PortData.from_mapping({
        "portId": "p1", "podUid": uid, "mac": "fa:16:3e:00:00:01",
        "address": "10.0.0.5/24", "gateway": "10.0.0.1"})))
    from kuryr_supervisor.cni.ipam.records import PodRef
    from kuryr_supervisor.workers.assembly import podport_bound
    podport_bound(client)(PodRef("ns", "p", uid))     # status.boundAt
    # [network_health] record: the node's NodeNetwork, written twice (the
    # second finds it), then released as an uninstall does.
    from kuryr_supervisor.netcheck.codecs import record as nodenetwork
    from kuryr_supervisor.netcheck.node.netrecord import RecordWriter, release
    report = nodenetwork.NetworkReport(nodenetwork.Daemon(True, 0.0))
    for _ in range(2):
        RecordWriter(client, "node-a", lambda: report, heartbeat=lambda: 60,
                     min_interval=lambda: 1).write(report)
    api.set_node_condition("node-a", {"type": "KuryrNetworkHealthy",
                                      "status": "True"})
    assert release(client, "node-a", "KuryrNetworkHealthy")
    verbs = {"GET": "get", "POST": "create", "PUT": "update",
             "DELETE": "delete"}
    used = set()
    for _, method, path, query in api.requests:
        parts = path.strip("/").split("/")
        if parts[:4] == ["apis", "kuryr-supervisor.openstack.org", "v1",
                         "nodenetworks"]:
            used.add(("nodenetworks/status" if parts[-1] == "status"
                      else "nodenetworks", verbs[method]))
            continue
        if parts[:2] == ["apis", "kuryr-supervisor.openstack.org"] and \
                parts[-1] == "status":
            used.add(("podports/status", method.lower()))
            continue
        if parts[:2] == ["apis", "kuryr-supervisor.openstack.org"]:
            used.add(("podports", "watch" if query.get("watch") else "list"))
            continue
        if parts[:2] != ["api", "v1"]:
            continue                      # /readyz, /healthz: non-resource
        if parts[2:] == ["pods"]:
            used.add(("pods", "watch" if query.get("watch") else "list"))
        elif parts[2] == "namespaces" and parts[4] == "events":
            used.add(("events", {"POST": "create"}.get(method, method.lower())))
        elif parts[2] == "namespaces" and parts[4] == "pods":
            used.add(("pods", "get"))
        elif parts[2] == "nodes":
            resource = "nodes/status" if parts[4:] == ["status"] else "nodes"
            used.add((resource, method.lower()))
        else:
            raise AssertionError(f"unexpected request {method} {path}")
    return used


def test_rbac_grants_exactly_what_is_used(api: FakeAPI) -> None:
    role = by_kind("ClusterRole")
    granted = set()
    for rule in role["rules"]:
        assert rule["apiGroups"] == (["kuryr-supervisor.openstack.org"]
                                     if rule["resources"][0].startswith(
                                         ("podports", "nodenetworks"))
                                     else [""])
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        granted |= {(r, v) for r in rule["resources"] for v in rule["verbs"]}
    assert granted == used_permissions(api)



# -- kustomize layout, image, hardening, metrics, uninstall ----------------------
def declared_version() -> str:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return parser["metadata"]["version"]


def container(docs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    (ds,) = [d for d in docs or documents() if d["kind"] == "DaemonSet"]
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    return dict(c)


def test_image_is_a_parameter_with_the_release_tag() -> None:
    raw = yaml.safe_load((BASE / "daemonset.yaml").read_text())
    (c,) = raw["spec"]["template"]["spec"]["containers"]
    assert ":" not in c["image"]                 # the base names no tag
    image = container()["image"]
    assert image.rsplit(":", 1)[1] == declared_version()
    for path in MANIFESTS.rglob("*.yaml"):
        assert ":latest" not in path.read_text(), path


def test_overlay_sets_namespace_and_image(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [rel(BASE, overlay)], "namespace": "cni",
        "images": [{"name": "kuryr-supervisor",
                    "newName": "registry.test/kuryr", "newTag": "9.9.9"}]}))
    docs = kustomize.build(overlay)
    assert container(docs)["image"] == "registry.test/kuryr:9.9.9"
    namespaced = [d for d in docs if d["kind"] not in
                  ("ClusterRole", "ClusterRoleBinding")]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"cni"}
    (binding,) = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"][0]["namespace"] == "cni"
    example = kustomize.build(MANIFESTS / "overlays" / "example")
    assert container(example)["image"].endswith(":" + declared_version())


def test_rendered_by_a_real_kubectl(tmp_path: Path) -> None:
    """kubectl 1.31's kustomize, not a look-alike: it reports its own
    version and refuses a JSON patch that removes a missing field."""
    version = subprocess.run([str(kustomize.kubectl()), "version", "--client"],
                             capture_output=True, text=True, check=True)
    assert "Client Version: v1.31." in version.stdout
    assert "Kustomize Version: v5." in version.stdout
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [rel(BASE, tmp_path)],
        "patches": [{"target": {"kind": "DaemonSet", "name": "kuryr-supervisor"},
                     "patch": "- {op: remove, path: /spec/nothing}"}]}))
    with pytest.raises(RuntimeError, match="/spec/nothing"):
        kustomize.build(tmp_path)


def test_every_kustomization_renders() -> None:
    """Every directory with a kustomization.yaml; components rendered
    alone too (kubectl accepts a Component as the root)."""
    dirs = sorted(p.parent for p in MANIFESTS.rglob("kustomization.yaml"))
    assert {d.relative_to(MANIFESTS).as_posix() for d in dirs} >= {
        "base", "controller", "overlays/example", "components/podmonitor",
        "components/uninstall"}
    for directory in dirs:
        if directory.name in ("uninstall", "ovs", "octavia"):
            continue                  # patches: need the base (below)
        assert kustomize.build(directory), directory


def test_hardened_security_context() -> None:
    ctx = container()["securityContext"]
    assert ctx["capabilities"]["drop"] == ["ALL"]
    # Exactly what tests/functional/test_capabilities.py proves necessary.
    assert sorted(ctx["capabilities"]["add"]) == ["NET_ADMIN", "SYS_ADMIN"]
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx.get("privileged", False) is False
    assert ctx["readOnlyRootFilesystem"] is True
    spec = pod_spec()
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not spec.get("hostPID") and not spec.get("hostIPC")
    ds = by_kind("DaemonSet")["spec"]
    assert ds["updateStrategy"]["type"] == "RollingUpdate"


def test_metrics_listener_is_published_apart_from_the_probes() -> None:
    c = container()
    port = default(metrics_conf.OPTS, "port")
    (published,) = c["ports"]
    assert (published["name"], published["containerPort"]) == ("metrics", port)
    env = {e["name"]: e for e in c["env"]}
    assert env["OS_METRICS__HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "status.podIP"
    notes = by_kind("DaemonSet")["spec"]["template"]["metadata"]["annotations"]
    assert notes["prometheus.io/port"] == str(port)
    assert daemon_conf().metrics.port == port
    assert port != default(health_conf.SERVER_OPTS, "port")


def with_components(tmp_path: Path, *names: str) -> list[dict[str, Any]]:
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [rel(BASE, tmp_path)], "namespace": "kube-system",
        "components": [rel(MANIFESTS / "components" / n, tmp_path)
                       for n in names]}))
    return kustomize.build(tmp_path)


def test_podmonitor_component_selects_the_daemon_pods(tmp_path: Path) -> None:
    docs = with_components(tmp_path, "podmonitor")
    (monitor,) = [d for d in docs if d["kind"] == "PodMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == "kube-system"
    labels = by_kind("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in {p["name"] for p in container()["ports"]}


def test_uninstall_component_turns_on_the_exit_hook(tmp_path: Path) -> None:
    docs = with_components(tmp_path, "uninstall")
    for doc in docs:
        model(doc)
    env = {e["name"]: e.get("value") for e in container(docs)["env"]}
    assert env["OS_CNI_INSTALL__UNINSTALL_ON_STOP"] == "true"
    assert "OS_CNI_INSTALL__UNINSTALL_ON_STOP" not in {
        e["name"] for e in container()["env"]}           # not in the base
    conf = daemon_conf()
    assert conf.cni_install.uninstall_on_stop is False


def test_configmap_doc_references_exist() -> None:
    text = by_kind("ConfigMap")["data"]["kuryr-supervisor.conf"]
    readme = docs.text()
    files = re.findall(r"[\w./-]+\.(?:rst|yaml|md)\b", text)
    assert files
    for name in files:
        assert (ROOT / name).exists() or (BASE / name).exists(), name
    prose = " ".join(line.strip().lstrip("#").strip()
                     for line in text.splitlines())
    for title in re.findall(r'README\.rst: "([^"]+)"', prose):
        assert title in readme, title
