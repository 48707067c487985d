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

import concurrent.futures
import ipaddress
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.cni.ipam import IpamStore
from tests.fixtures.containerd import (  # noqa: F401 - fixtures
    CriNode,
    NodeDaemon,
    cri_node_fixture,
    install_network,
    wait_network,
)
from tests.fixtures.containerd.cri import CRIClient, details
from tests.fixtures.daemon import wait_until
from tests.fixtures.fakeapi import FakeAPI

pytestmark = pytest.mark.privileged
NODE = "node-cri"


def subnet(prefix: int = 24) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(
        f"10.{random.randrange(200, 250)}.{random.randrange(256)}.0/{prefix}")


class Pods:
    """Sandboxes a test runs through the CRI, all removed after it."""

    def __init__(self, cri_node: CriNode, api: FakeAPI | None) -> None:
        self.cri_node, self.api = cri_node, api
        self.cri: CRIClient = cri_node.cri
        self.ids: list[str] = []

    def meta(self) -> tuple[str, str, str]:
        """A pod (name, namespace, uid), in the API when there is one."""
        name = f"pod-{secrets.token_hex(4)}"
        if self.api is None:
            return name, "default", f"uid-{secrets.token_hex(8)}"
        pod = self.cri_node.node.call(self.api.add_pod, "default", name, NODE)
        return name, "default", str(pod["metadata"]["uid"])

    def run(self, meta: tuple[str, str, str] | None = None) -> str:
        name, namespace, uid = meta or self.meta()
        sandbox = self.cri.run(name, namespace, uid,
                               cgroup_parent=self.cri_node.containerd.cgroup_parent,
                               labels={"ksvt": "1"})
        self.ids.append(sandbox)
        return sandbox

    def cleanup(self) -> None:
        for sandbox in self.ids:
            for call in (self.cri.stop, self.cri.remove):
                try:
                    call(sandbox)
                except CRIClient.errors:
                    pass


def start_daemon(cri_node: CriNode, workdir: Path, api: FakeAPI | None,
                 **options: dict[str, Any]) -> NodeDaemon:
    opts: dict[str, dict[str, Any]] = {"ipam": {"subnet": str(subnet())}}
    if api is not None:
        opts["kubernetes"] = {"api_root": api.url, "node_name": NODE,
                              "request_timeout": 2.0, "api_check_interval": 0.5}
        opts["ipam"] = {"use_node_pod_cidr": True}
    for group, values in options.items():
        opts.setdefault(group, {}).update(values)
    workdir.mkdir(exist_ok=True)
    daemon = NodeDaemon(cri_node.node, workdir, opts)
    try:
        daemon.start()
        daemon.wait_ready(30)
    except BaseException:
        daemon.close()
        raise
    return daemon


@pytest.fixture
def api(cri_node: CriNode) -> Iterator[FakeAPI]:
    """The fake Kubernetes API, listening inside the node."""
    server = cri_node.node.call(FakeAPI)
    server.add_node(NODE, pod_cidr=str(subnet()))
    server.start()
    yield server
    server.stop()


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


def store(daemon: NodeDaemon) -> list[Any]:
    """Every allocation row in the daemon's store."""
    path = Path(daemon.options["ipam"]["state_dir"], "ipam.sqlite")
    net = daemon.options["ipam"].get("subnet") or "10.0.0.0/8"
    return list(IpamStore(str(path), ipaddress.IPv4Network(net)).list())


def host_veths(daemon: NodeDaemon) -> list[str]:
    done = daemon.node.run("ip", "-j", "link", "show", "master", daemon.bridge,
                           check=False)
    return [link["ifname"] for link in json.loads(done.stdout or "[]")]


def requests(daemon: NodeDaemon) -> dict[tuple[str, str], float]:
    """``cni_requests_total`` by (command, code)."""
    return {(dict(labels)["command"], dict(labels)["code"]): value
            for (name, labels), value in daemon.metrics().items()
            if name == "kuryr_supervisor_cni_requests_total"}


def failures(daemon: NodeDaemon) -> float:
    return daemon.metrics()[("kuryr_supervisor_cni_consecutive_failures", ())]


def in_pod(netns: str, *argv: str) -> Any:
    done = subprocess.run(["nsenter", f"--net={netns}", "ip", "-j", *argv],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout or "[]")


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

    pods.cri.stop(sandbox)
    assert store(daemon) == [] and host_veths(daemon) == []
    pods.cri.stop(sandbox)                       # a second Stop is fine
    pods.cri.remove(sandbox)
    assert sandbox not in {s.id for s in pods.cri.list({"ksvt": "1"})}
    assert store(daemon) == [] and host_veths(daemon) == []
    counts = requests(daemon)
    assert counts.get(("ADD", "0")) == 1, counts
    # Stop's DEL (netns, prevResult), Remove's DEL (no netns): all answered 0
    assert counts.get(("DEL", "0"), 0) >= 2, counts
    assert not [k for k in counts if k[0] == "DEL" and k[1] != "0"], counts
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


def test_installed_conflist_network_ready_and_changed(
        cri_node: CriNode, tmp_path: Path, go_shim: Path) -> None:
    """containerd reports NetworkReady false until our daemon's installer
    writes its conflist, true after; a changed conflist (another network,
    capabilities declared, so containerd sends runtimeConfig) is used for
    the next pod, with neither containerd nor the daemon restarted."""
    cri = cri_node.cri
    cri_node.clear_networks()
    wait_until(lambda: not cri.condition().status, 20)
    condition = cri.condition()
    assert condition.reason == "NetworkPluginNotReady", condition
    assert "cni plugin not initialized" in condition.message, condition
    network = f"ksvt-{secrets.token_hex(3)}"
    daemon = start_daemon(cri_node, tmp_path / "daemon", None, cni_install={
        "enabled": True, "bin_dir": str(cri_node.bin_dir),
        "conf_dir": str(cri_node.conf_dir), "network_name": network})
    pods = Pods(cri_node, None)
    containerd_pid, daemon_pid = cri_node.containerd.proc.pid, daemon.pid
    try:
        wait_until(lambda: cri.condition().status, 20)
        wait_network(cri, network)
        first = pods.run()
        assert cri.status(first).network.ip

        changed = f"ksvt-{secrets.token_hex(3)}"
        template = tmp_path / "template.conflist"
        template.write_text(json.dumps({
            "cniVersion": "1.0.0", "name": changed, "plugins": [{
                "type": "kuryr-cni", "daemon_socket": f"unix://{daemon.socket_path}",
                "capabilities": {"portMappings": True, "bandwidth": True,
                                 "io.kubernetes.cri.pod-annotations": True}}]}))
        install_network(cri_node, daemon, changed, compiled=go_shim, template=template)
        wait_network(cri, changed)
        second = cri.run(f"pod-{secrets.token_hex(3)}", "default", "uid-2",
                         cgroup_parent=cri_node.containerd.cgroup_parent,
                         annotations={"example.com/a": "b"}, port_mappings=[(80, 0)],
                         labels={"ksvt": "1"})
        pods.ids.append(second)
        assert cri.status(second).network.ip
        # libcni cached the second ADD under the changed network's name
        assert Path(f"/var/lib/cni/results/{changed}-{second}-eth0").exists()
        assert {r.container_id for r in store(daemon)} == {first, second}
        for sandbox in (first, second):
            cri.stop(sandbox)
            cri.remove(sandbox)
        assert store(daemon) == [] and host_veths(daemon) == []
        assert (cri_node.containerd.proc.pid, daemon.pid) == (containerd_pid, daemon_pid)
        assert cri_node.containerd.proc.poll() is None and daemon.proc.poll() is None
        assert failures(daemon) == 0
    finally:
        pods.cleanup()
        cri_node.clear_networks()
        daemon.close()


def _worker(daemon: NodeDaemon, name: str) -> int:
    try:
        return daemon.worker_pids()[name]
    except (OSError, AssertionError, KeyError, ValueError):
        return 0


def test_fifty_sandboxes_through_kills_and_a_restart(
        cri_node: CriNode, tmp_path: Path, api: FakeAPI, go_shim: Path) -> None:
    """50 RunPodSandbox in parallel while the Server is SIGKILLed 5 times,
    the HealthManager 5 times and the daemon restarted once: every sandbox
    starts; once all are stopped and removed, nothing is left."""
    daemon = start_daemon(cri_node, tmp_path / "daemon", api, supervisor={
        "restart_backoff_max": 0.5, "max_restarts": 1000})
    pods = Pods(cri_node, api)
    network = f"ksvt-{secrets.token_hex(3)}"
    events: list[tuple[str, int]] = []          # (what, sandboxes done then)
    done: list[str] = []
    try:
        install_network(cri_node, daemon, network, compiled=go_shim)
        wait_network(cri_node.cri, network)
        metas = [pods.meta() for _ in range(50)]
        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            futures = [pool.submit(pods.run, meta) for meta in metas]
            for f in futures:
                f.add_done_callback(lambda f: done.append("x"))
            plan = ["server", "health"] * 5
            plan.insert(5, "daemon")
            for what in plan:
                if what == "daemon":
                    daemon.signal(signal.SIGTERM)
                    assert daemon.wait_exit(60) == 0, daemon.log()
                    daemon.start()
                    daemon.wait_ready(60)
                else:
                    victim = wait_until(lambda w=what: _worker(daemon, w), 60)
                    os.kill(victim, signal.SIGKILL)
                    wait_until(lambda w=what, v=victim: _worker(daemon, w) not in (0, v),
                               60)
                events.append((what, len(done)))
            failed = [details(f.exception()) for f in futures if f.exception()]
        print("kills (what, sandboxes started by then):", events)
        assert failed == [], failed[:3]
        assert len(pods.ids) == 50
        # the kills and the restart happened while sandboxes were starting
        assert events[0][1] < 50 and any(w == "daemon" and n < 50 for w, n in events), events
        rows = store(daemon)
        assert len(rows) == 50 and {r.container_id for r in rows} == set(pods.ids)
        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            list(pool.map(lambda s: (pods.cri.stop(s), pods.cri.remove(s)), pods.ids))
        assert store(daemon) == [] and host_veths(daemon) == []
        assert not {s.id for s in pods.cri.list({"ksvt": "1"})} & set(pods.ids)
        assert daemon.status()["cniFailures"] == 0
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
