"""The Kubernetes manifests: schema-valid, consistent with the daemon's
defaults, and granting exactly the API calls the daemon makes."""
from __future__ import annotations

import configparser
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
from kuryr_supervisor.conf import supervisor as supervisor_conf
from tests.fixtures.fakeapi import FakeAPI

MANIFESTS = Path(__file__).parents[2] / "etc" / "kubernetes"
API_VERSIONS = {"ServiceAccount": "v1", "ConfigMap": "v1", "DaemonSet": "apps/v1",
                "ClusterRole": "rbac.authorization.k8s.io/v1",
                "ClusterRoleBinding": "rbac.authorization.k8s.io/v1"}


def documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


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
    assert {"NET_ADMIN", "SYS_ADMIN"} <= set(
        container["securityContext"]["capabilities"]["add"])
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
    _, rv = client.list_pods()
    list(client.watch_pods(rv))
    client.get_pod("ns", "p")
    client.pod_cidr()
    client.patch_node_condition({"type": "KuryrCNIHealthy", "status": "True"})
    client.probe(timeout=1)
    used = set()
    for _, method, path, query in api.requests:
        parts = path.strip("/").split("/")
        if parts[:2] != ["api", "v1"]:
            continue                      # /readyz, /healthz: non-resource
        if parts[2:] == ["pods"]:
            used.add(("pods", "watch" if query.get("watch") else "list"))
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
        assert rule["apiGroups"] == [""]
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        granted |= {(r, v) for r in rule["resources"] for v in rule["verbs"]}
    assert granted == used_permissions(api)
