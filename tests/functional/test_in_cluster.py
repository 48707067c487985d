"""The daemon in a pod's shoes: Kubernetes mode from the service account
alone, as the DaemonSet runs it (no api_root, no kubeconfig), over TLS.

The daemon runs in a private mount namespace whose ``/run`` (``/var/run``)
holds a service account (``token``, ``ca.crt``) as the kubelet mounts it,
and finds the API from ``KUBERNETES_SERVICE_HOST``/``_PORT``: an https
listener on loopback with certificates made by the openssl command. The
host's own ``/run`` is never touched.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures import pki as pki_mod
from tests.fixtures.daemon import Daemon, wait_until
from tests.fixtures.fakeapi import FakeAPI

pytestmark = pytest.mark.privileged

NODE = "node-ic"


class InClusterDaemon(Daemon):
    """The daemon with ``rundir`` as its ``/run``."""

    def __init__(self, workdir: Path, rundir: Path, env: dict[str, str]) -> None:
        super().__init__(workdir, {"kubernetes": {"node_name": NODE}}, env=env)
        self.rundir = rundir

    def command(self) -> list[str]:
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount --bind "$0" /run && exec "$@"', str(self.rundir),
                *super().command()]


@pytest.fixture
def pki(tmp_path: Path) -> pki_mod.Pki:
    return pki_mod.make(tmp_path / "pki")


@pytest.fixture
def api(pki: pki_mod.Pki) -> Iterator[FakeAPI]:
    fake = FakeAPI(tls=pki.server_context()).start()
    fake.add_node(NODE)
    yield fake
    fake.stop()


def test_service_account_over_tls(tmp_path: Path, pki: pki_mod.Pki,
                                  api: FakeAPI) -> None:
    rundir = tmp_path / "run"
    account = rundir / "secrets" / "kubernetes.io" / "serviceaccount"
    account.mkdir(parents=True)
    shutil.copy(pki.ca, account / "ca.crt")
    (account / "token").write_text("sa-token-1")
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": "127.0.0.1",
           "KUBERNETES_SERVICE_PORT": api.url.rsplit(":", 1)[1]}
    (tmp_path / "daemon").mkdir()
    daemon = InClusterDaemon(tmp_path / "daemon", rundir, env)
    try:
        daemon.start()
        daemon.wait_ready(30)
        # Ready includes the k8s-api check: the API answered over TLS,
        # verified with the mounted CA, with the mounted token.
        assert "Bearer sa-token-1" in api.auth, api.auth[-5:]
        assert any("/api/v1/pods" in path for _, _, path, _ in api.requests)
        # The kubelet rotates the bound token: the next requests carry it.
        (account / "token").write_text("sa-token-2")
        wait_until(lambda: api.auth[-1] == "Bearer sa-token-2", 15)
        assert daemon.probe("/ready") == 200
    finally:
        daemon.close()
