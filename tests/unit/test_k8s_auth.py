"""How the Kubernetes transport finds and proves itself to the API server:
TLS against a real https listener on loopback (certificates made by the
openssl command), Kuryr's options, kubeconfigs as kubectl reads them, and
the in-cluster service account; and the Lease as the official client reads
it back."""
from __future__ import annotations

import base64
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg

from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes import config
from kuryr_supervisor.kubernetes.leases import write_lease
from tests.fixtures import pki as pki_mod
from tests.fixtures.fakeapi import FakeAPI, kubernetes_conf


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> pki_mod.Pki:
    return pki_mod.make(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def api(pki: pki_mod.Pki) -> Iterator[FakeAPI]:
    fake = FakeAPI(tls=pki.server_context()).start()
    yield fake
    fake.stop()


def make_conf(**opts: object) -> cfg.ConfigOpts:
    conf: cfg.ConfigOpts = kubernetes_conf(node_name="node-a", **opts)
    return conf


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> str:
    """A kubeconfig (JSON is YAML) with one context, current."""
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}]}))
    return str(path)


def from_kubeconfig(path: str) -> k8s.K8sClient:
    return k8s.K8sClient.from_conf(make_conf(kubeconfig=path), environ={})


def test_api_root_verifies_the_server_with_its_ca(
        api: FakeAPI, pki: pki_mod.Pki, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t1\n")
    client = k8s.K8sClient.from_conf(make_conf(
        api_root=api.url, ssl_verify_server_crt=True,
        ssl_ca_crt_file=str(pki.ca), token_file=str(token)), environ={})
    assert client.node_pods.list() == ([], "1")
    assert api.auth[-1] == "Bearer t1"


def test_a_server_its_ca_does_not_vouch_for_is_refused(
        api: FakeAPI, tmp_path: Path) -> None:
    stranger = pki_mod.make(tmp_path / "other")
    client = k8s.K8sClient.from_conf(make_conf(
        api_root=api.url, ssl_verify_server_crt=True,
        ssl_ca_crt_file=str(stranger.ca)), environ={})
    with pytest.raises(k8s.K8sTemporary, match="CERTIFICATE_VERIFY_FAILED"):
        client.node_pods.list()
    assert api.requests == []       # no request, no token, was sent


def test_kubeconfig_inline_ca_and_client_certificate(
        api: FakeAPI, pki: pki_mod.Pki, tmp_path: Path) -> None:
    before = set(glob.glob(f"{tempfile.gettempdir()}/kuryr-k8s-*"))
    path = kubeconfig(tmp_path / "kubeconfig",
                      {"server": api.url, "certificate-authority-data": b64(pki.ca)},
                      {"client-certificate-data": b64(pki.client_cert),
                       "client-key-data": b64(pki.client_key)})
    client = from_kubeconfig(path)
    assert client.node_pods.list() == ([], "1")
    assert api.peers[-1] == pki_mod.CLIENT_CN and api.auth[-1] == ""
    # The key was on disk only while the context loaded it.
    assert set(glob.glob(f"{tempfile.gettempdir()}/kuryr-k8s-*")) == before


def test_kubeconfig_files_relative_to_it_and_a_rotated_token_file(
        api: FakeAPI, pki: pki_mod.Pki, tmp_path: Path) -> None:
    home = tmp_path / "kube"
    home.mkdir()
    for src, name in ((pki.ca, "ca.crt"), (pki.client_cert, "node.crt"),
                      (pki.client_key, "node.key")):
        shutil.copy(src, home / name)
    (home / "token").write_text("first")
    path = kubeconfig(home / "config",
                      {"server": api.url, "certificate-authority": "ca.crt"},
                      {"client-certificate": "node.crt", "client-key": "node.key",
                       "tokenFile": "token"})
    client = from_kubeconfig(path)
    client.node_pods.list()
    (home / "token").write_text("second")
    client.node_pods.list()
    assert api.auth[-2:] == ["Bearer first", "Bearer second"]
    assert api.peers[-1] == pki_mod.CLIENT_CN


def test_kubeconfig_insecure_skip_tls_verify(api: FakeAPI, tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "kubeconfig",
                      {"server": api.url, "insecure-skip-tls-verify": True},
                      {"token": "plain"})
    assert from_kubeconfig(path).node_pods.list() == ([], "1")
    assert api.auth[-1] == "Bearer plain"


@pytest.mark.parametrize("text", [
    '"false"', '"true"', '"yes"', '"no"', '"False"', "0", "1", "''", "[]"])
def test_a_boolean_that_is_not_a_yaml_boolean_is_refused(
        tmp_path: Path, text: str) -> None:
    """A quoted ``"false"`` read by its truth would turn verification off;
    kubectl refuses it, and so does the daemon, naming the field."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        "current-context: ctx\n"
        "contexts: [{name: ctx, context: {cluster: c, user: u}}]\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', "
        f"insecure-skip-tls-verify: {text}}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n")
    with pytest.raises(k8s.K8sPermanent,
                       match="'insecure-skip-tls-verify' to .*not a boolean"):
        from_kubeconfig(str(path))


@pytest.mark.parametrize(("text", "verify"), [
    ("false", True), ("true", False), ("yes", False), ("no", True),
    ("null", True), ("", True)])
def test_yaml_booleans_are_read_as_booleans(
        tmp_path: Path, text: str, verify: bool) -> None:
    """Unquoted YAML booleans (1.1's ``yes``/``no`` too, as kubectl's YAML
    reads them); null is unset: verified."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        "current-context: ctx\n"
        "contexts: [{name: ctx, context: {cluster: c}}]\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', "
        f"insecure-skip-tls-verify: {text}}}}}]\n")
    assert config.make_endpoint(make_conf(kubeconfig=str(path)),
                                environ={}).verify is verify


@pytest.mark.parametrize("kind", ["exec", "auth-provider"])
def test_credential_plugins_are_refused_not_run(tmp_path: Path, kind: str) -> None:
    ran = tmp_path / "ran"
    plugin = {"apiVersion": "client.authentication.k8s.io/v1",
              "command": "/bin/touch", "args": [str(ran)]}
    path = kubeconfig(tmp_path / "kubeconfig", {"server": "https://127.0.0.1:1"},
                      {kind: plugin if kind == "exec" else {"name": "oidc"}})
    with pytest.raises(k8s.K8sPermanent, match=f"'{kind}'.*does not run"):
        from_kubeconfig(path)
    assert not ran.exists()


@pytest.mark.parametrize(("text", "says"), [
    ("{", "not YAML"),
    ('{"clusters": []}', "no current-context"),
    ('{"current-context": "x", "contexts": []}', "no context named 'x'"),
    ('{"current-context": "x", "contexts": [{"name": "x", "context": '
     '{"cluster": "c"}}], "clusters": [{"name": "c", "cluster": '
     '{"server": "ftp://h"}}]}', "no http\\(s\\) server"),
    ('{"current-context": "x", "contexts": [{"name": "x", "context": '
     '{"cluster": "c"}}], "clusters": [{"name": "c", "cluster": {"server": '
     '"https://h", "certificate-authority-data": "%%%"}}]}', "not base64"),
    ('{"current-context": "x", "contexts": [{"name": "x", "context": '
     '{"cluster": "c", "user": "u"}}], "clusters": [{"name": "c", "cluster": '
     '{"server": "https://h"}}], "users": [{"name": "u", "user": '
     '{"username": "a", "password": "b"}}]}', "basic authentication"),
    ('{"current-context": "x", "contexts": [{"name": "x", "context": '
     '{"cluster": "c"}}], "clusters": [{"name": "c", "cluster": {"server": '
     '"https://h", "proxy-url": "http://p:3128"}}]}', "sets 'proxy-url'"),
    ('{"current-context": "x", "contexts": [{"name": "x", "context": '
     '{"cluster": "c"}}], "clusters": [{"name": "c", "cluster": {"server": '
     '"https://h", "tls-server-name": "api"}}]}', "sets 'tls-server-name'"),
])
def test_a_broken_kubeconfig_is_permanent_and_named(
        tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    with pytest.raises(k8s.K8sPermanent, match=says) as info:
        from_kubeconfig(str(path))
    assert str(path) in str(info.value)


def test_missing_tls_material_is_permanent(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "kubeconfig", {"server": "https://127.0.0.1:1"},
                      {"client-certificate": "gone.crt", "client-key": "gone.key"})
    with pytest.raises(k8s.K8sPermanent, match="TLS material"):
        from_kubeconfig(path)


def test_in_cluster_service_account(api: FakeAPI, pki: pki_mod.Pki,
                                    tmp_path: Path) -> None:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    shutil.copy(pki.ca, account / "ca.crt")
    (account / "token").write_text("sa-1")
    port = api.url.rsplit(":", 1)[1]
    endpoint = config.in_cluster({"KUBERNETES_SERVICE_HOST": "127.0.0.1",
                                  "KUBERNETES_SERVICE_PORT": port}, str(account))
    client = k8s.K8sClient(endpoint, node="node-a")
    client.node_pods.list()
    (account / "token").write_text("sa-2")      # the kubelet rotated it
    client.node_pods.list()
    assert api.auth[-2:] == ["Bearer sa-1", "Bearer sa-2"]
    v6 = config.in_cluster({"KUBERNETES_SERVICE_HOST": "fd00::1",
                            "KUBERNETES_SERVICE_PORT": "443"}, str(account))
    assert v6.host == "https://[fd00::1]:443"
    (account / "token").unlink()
    with pytest.raises(k8s.K8sPermanent, match="token"):
        config.in_cluster({"KUBERNETES_SERVICE_HOST": "127.0.0.1",
                           "KUBERNETES_SERVICE_PORT": port}, str(account))


def test_the_lease_we_write_is_the_official_clients_lease(tmp_path: Path) -> None:
    """Written as JSON by the transport, read back by the kubernetes client
    library's models (strict: its MicroTime parsing, its field names)."""
    from kubernetes import client as official
    fake = FakeAPI().start()
    try:
        ours = k8s.K8sClient.from_conf(make_conf(api_root=fake.url), environ={})
        written = write_lease(ours.leases, "kube-system", "ctl", holder="a",
                              duration=15, transitions=2, acquired=True,
                              resource_version=None, renewed=1700000000.25,
                              annotations={"k": "v"})
        configuration = official.Configuration()
        configuration.host = fake.url
        with official.ApiClient(configuration) as raw:
            lease = official.CoordinationV1Api(raw).read_namespaced_lease(
                "ctl", "kube-system")
    finally:
        fake.stop()
    assert lease.spec.holder_identity == "a"
    assert lease.spec.lease_duration_seconds == 15
    assert lease.spec.lease_transitions == 2
    assert lease.spec.renew_time.timestamp() == 1700000000.25
    assert lease.spec.acquire_time == lease.spec.renew_time
    assert lease.metadata.annotations == {"k": "v"}
    assert written.renew_time == 1700000000.25 and written.holder == "a"


def check_config(tmp_path: Path, kubeconfig_path: str, *args: str
                 ) -> subprocess.CompletedProcess[str]:
    conf = tmp_path / "k.conf"
    conf.write_text(f"[kubernetes]\nkubeconfig = {kubeconfig_path}\n"
                    f"[ipam]\nstate_dir = {tmp_path / 'state'}\n")
    return subprocess.run(
        [sys.executable, "-m", "kuryr_supervisor.daemon", *args,
         "--config-file", str(conf)], capture_output=True, text=True,
        timeout=60, env={"PATH": "/usr/bin:/bin"})


def refused(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 78, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    return line


def test_an_unusable_kubeconfig_stops_the_start_with_one_line(tmp_path: Path) -> None:
    """Checked before any worker starts: exit 78, one line naming the file
    and the cause (``check-config`` alike)."""
    path = kubeconfig(tmp_path / "kubeconfig", {"server": "https://127.0.0.1:1"},
                      {"exec": {"command": "/bin/true"}})
    for args in (["check-config"], []):
        line = refused(check_config(tmp_path, path, *args))
        assert path in line and "'exec'" in line, line


def test_a_quoted_boolean_stops_the_start_with_one_line(tmp_path: Path) -> None:
    """``"false"`` is refused before any worker starts (exit 78, one line
    naming the field), not read as true: TLS verification stays on or the
    daemon does not start."""
    path = kubeconfig(tmp_path / "kubeconfig", {
        "server": "https://127.0.0.1:1", "insecure-skip-tls-verify": "false"},
        {"token": "t"})
    for args in (["check-config"], []):
        line = refused(check_config(tmp_path, path, *args))
        assert path in line and "'insecure-skip-tls-verify' to 'false'" in line, line


def test_a_kubeconfig_others_can_change_is_refused(tmp_path: Path) -> None:
    """Whoever can rewrite it can point a root daemon at their own server."""
    home = tmp_path / "kube"
    home.mkdir()
    path = kubeconfig(home / "config", {"server": "https://127.0.0.1:1"},
                      {"token": "t"})
    assert check_config(tmp_path, path, "check-config").returncode == 0
    os.chmod(path, 0o666)
    line = refused(check_config(tmp_path, path, "check-config"))
    assert f"[kubernetes] kubeconfig {path} is writable by group or others" in line
    os.chmod(path, 0o644)
    os.chmod(home, 0o777)       # anyone could swap the file
    line = refused(check_config(tmp_path, path, "check-config"))
    assert "untrusted directory" in line and str(home) in line, line


@pytest.mark.privileged
def test_a_ca_bundle_another_user_owns_is_refused(
        pki: pki_mod.Pki, tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    shutil.copy(pki.ca, ca)
    os.chown(ca, 65534, 65534)
    path = kubeconfig(tmp_path / "kubeconfig", {
        "server": "https://127.0.0.1:1", "certificate-authority": str(ca)},
        {"token": "t"})
    line = refused(check_config(tmp_path, path, "check-config"))
    assert f"the CA bundle {ca} is owned by uid 65534" in line, line


def test_a_server_url_with_a_path_prefixes_every_request(tmp_path: Path) -> None:
    """An API behind a proxy (``https://proxy/k8s/clusters/c1``), as
    kubectl reads the kubeconfig's server."""
    import http.server
    import threading
    paths: list[str] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:       # noqa: N802 - http.server's name
            paths.append(self.path)
            body = b'{"items": [], "metadata": {"resourceVersion": "7"}}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/k8s/clusters/c1/"
        path = kubeconfig(tmp_path / "kubeconfig", {"server": url}, {"token": "t"})
        assert from_kubeconfig(path).node_pods.list() == ([], "7")
    finally:
        server.shutdown()
        server.server_close()
    assert paths and paths[0].startswith("/k8s/clusters/c1/api/v1/pods?"), paths
