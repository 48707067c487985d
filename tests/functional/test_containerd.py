"""The kubelet's path: containerd 1.6's CRI plugin calls our CNI.

A private containerd (``tests/fixtures/containerd``) in a network namespace
that plays the node, our daemon started in the same namespace, and a CRI
client of our own asking for pod sandboxes as a kubelet does. containerd
calls ADD in RunPodSandbox, DEL in StopPodSandbox (netns path and cached
result) and DEL again in RemovePodSandbox (empty ``CNI_NETNS``, no
prevResult); after a failed ADD it calls DEL at once and drops the sandbox.
Everything is checked through the runtime's own status and, independently,
with ``ip`` in the node and in the pod, in the daemon's store and in its
metrics.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.containerd import (  # noqa: F401 - fixtures
    CriNode,
    NodeDaemon,
    cri_node_fixture,
    install_network,
    wait_network,
)
from tests.fixtures.containerd.cri import CRIClient, details
from tests.fixtures.containerd.pods import (  # noqa: F401 - fixtures
    Pods,
    api_fixture,
    failures,
    host_veths,
    in_pod,
    requests,
    start_daemon,
    store,
    subnet,
)

pytestmark = pytest.mark.privileged


@pytest.fixture(params=["kubernetes", "standalone"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def setup(cri_node: CriNode, tmp_path: Path, mode: str, go_shim: Path,
          request: pytest.FixtureRequest
          ) -> Iterator[tuple[NodeDaemon, Pods, str]]:
    """Daemon (in either mode), our network installed and loaded, pods."""
    fake = request.getfixturevalue("api") if mode == "kubernetes" else None
    daemon = start_daemon(cri_node, tmp_path / "daemon", fake)
    pods = Pods(cri_node, fake)
    network = f"ksvt-{secrets.token_hex(3)}"
    try:
        install_network(cri_node, daemon, network, compiled=go_shim)
        wait_network(cri_node.cri, network)
        yield daemon, pods, network
    finally:
        pods.cleanup()
        cri_node.clear_networks()
        daemon.close()


def test_run_stop_remove(setup: tuple[NodeDaemon, Pods, str]) -> None:
    daemon, pods, _ = setup
    sandbox = pods.run()
    status = pods.cri.status(sandbox)
    assert status.state == pods.cri.pb.SANDBOX_READY
    (row,) = store(daemon)
    assert row.container_id == sandbox
    name = pods.cri.status(sandbox).metadata.name
    assert (row.pod.namespace, row.pod.name) == ("default", name)   # CNI_ARGS
    assert status.network.ip == str(row.address).split("/")[0]

    netns = pods.cri.netns(sandbox)
    (eth0,) = in_pod(netns, "addr", "show", "dev", "eth0")
    assert [a["local"] for a in eth0["addr_info"] if a["family"] == "inet"] \
        == [status.network.ip]
    routes = in_pod(netns, "route", "show", "default")
    assert len(routes) == 1 and routes[0]["dev"] == "eth0", routes
    assert len(host_veths(daemon)) == 1
    ping = shutil.which("ping") or "/bin/busybox"
    daemon.node.run(*([ping] if ping.endswith("/ping") else [ping, "ping"]),
                    "-c", "1", "-W", "2", status.network.ip)

    def dels() -> float:
        counts = requests(daemon)
        assert not [k for k in counts if k[0] == "DEL" and k[1] != "0"], counts
        return counts.get(("DEL", "0"), 0)

    pods.cri.stop(sandbox)                       # DEL with the netns and prevResult
    assert store(daemon) == [] and host_veths(daemon) == []
    assert not os.path.exists(netns)             # containerd removed the netns
    after_stop = dels()
    assert after_stop >= 1
    pods.cri.stop(sandbox)                       # a second Stop is fine
    after_second_stop = dels()
    pods.cri.remove(sandbox)                     # DEL with an empty CNI_NETNS
    assert dels() == after_second_stop + 1
    assert sandbox not in {s.id for s in pods.cri.list({"ksvt": "1"})}
    assert store(daemon) == [] and host_veths(daemon) == []
    assert requests(daemon).get(("ADD", "0")) == 1
    assert failures(daemon) == 0


def test_failed_add_leaves_nothing(cri_node: CriNode, tmp_path: Path, mode: str,
                                   go_shim: Path, request: pytest.FixtureRequest
                                   ) -> None:
    """Kubernetes: a pod the API does not have. Standalone: the pool is
    empty. RunPodSandbox carries our error; containerd's clean-up DEL
    succeeds; nothing is left and nothing counts against the budget."""
    fake = request.getfixturevalue("api") if mode == "kubernetes" else None
    # standalone: a /30 holds the gateway and one pod
    daemon = start_daemon(cri_node, tmp_path / "daemon", fake,
                          **({} if fake else {"ipam": {"subnet": str(subnet(30))}}))
    pods = Pods(cri_node, fake)
    network = f"ksvt-{secrets.token_hex(3)}"
    try:
        install_network(cri_node, daemon, network, compiled=go_shim)
        wait_network(cri_node.cri, network)
        before = store(daemon)
        if fake is None:
            pods.run()
            before = store(daemon)
            meta = pods.meta()
            expected = "no free address"
        else:
            meta = (f"ghost-{secrets.token_hex(3)}", "default", "uid-ghost")
            expected = f"pod default/{meta[0]} is gone"
        with pytest.raises(CRIClient.errors) as caught:
            pods.run(meta)
        text = details(caught.value)
        assert expected in text, text
        assert 'plugin type="kuryr-cni" failed (add): ' in text, text
        names = {s.metadata.name for s in pods.cri.list({"ksvt": "1"})}
        assert meta[0] not in names
        assert store(daemon) == before
        assert len(host_veths(daemon)) == len(before)
        counts = requests(daemon)
        assert not [k for k in counts if k[0] == "DEL" and k[1] != "0"], counts
        assert counts.get(("DEL", "0"), 0) >= 1, counts
        assert failures(daemon) == 0
        assert daemon.probe("/alive") == 200
    finally:
        pods.cleanup()
        cri_node.clear_networks()
        daemon.close()


def test_result_version_containerd_refuses(cri_node: CriNode, tmp_path: Path,
                                           go_shim: Path) -> None:
    """Why the installed conflist says 1.0.0: containerd 1.6 (libcni 1.1)
    refuses a 1.1.0 result after our ADD has plumbed the pod. Its clean-up
    DEL must then undo everything, as a kubelet retrying the pod relies on."""
    daemon = start_daemon(cri_node, tmp_path / "daemon", None)
    pods = Pods(cri_node, None)
    network = f"ksvt-{secrets.token_hex(3)}"
    template = tmp_path / "template.conflist"
    template.write_text(json.dumps({
        "cniVersion": "1.1.0", "name": network, "plugins": [{
            "type": "kuryr-cni", "daemon_socket": f"unix://{daemon.socket_path}"}]}))
    try:
        install_network(cri_node, daemon, network, compiled=go_shim, template=template)
        wait_network(cri_node.cri, network)
        meta = pods.meta()
        with pytest.raises(CRIClient.errors) as caught:
            pods.run(meta)
        text = details(caught.value)
        assert 'failed (add): unsupported CNI result version "1.1.0"' in text, text
        assert store(daemon) == [] and host_veths(daemon) == []
        counts = requests(daemon)
        assert counts.get(("ADD", "0")) == 1 and counts.get(("DEL", "0"), 0) >= 1, counts
        assert meta[0] not in {s.metadata.name for s in pods.cri.list({"ksvt": "1"})}
        assert failures(daemon) == 0
    finally:
        pods.cleanup()
        cri_node.clear_networks()
        daemon.close()
