"""containerd's CRI through changes and failures on the node: the conflist
our installer writes turns NetworkReady on and a changed one is used with
no restart; 50 sandboxes start while the daemon's workers are killed and
the daemon is restarted, and none fails or leaks.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import random
import secrets
import signal
import time
from pathlib import Path

import pytest

from tests.fixtures.containerd import (  # noqa: F401 - fixtures
    CriNode,
    NodeDaemon,
    cri_node_fixture,
    install_network,
    wait_network,
)
from tests.fixtures.containerd.cri import details
from tests.fixtures.containerd.pods import (  # noqa: F401 - fixtures
    Pods,
    api_fixture,
    failures,
    host_veths,
    start_daemon,
    store,
)
from tests.fixtures.daemon import wait_until
from tests.fixtures.fakeapi import FakeAPI

pytestmark = pytest.mark.privileged
SPREAD = 8.0                  # seconds over which the 50 Runs start


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
    """50 RunPodSandbox at once while the Server is SIGKILLed 5 times,
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
        # 50 at once, each starting within SPREAD seconds (as a kubelet
        # starts a ReplicaSet's pods), so the kills fall among them
        def start(meta: tuple[str, str, str]) -> str:
            time.sleep(random.uniform(0, SPREAD))
            return pods.run(meta)
        with concurrent.futures.ThreadPoolExecutor(50) as pool:
            futures = [pool.submit(start, meta) for meta in metas]
            for f in futures:
                f.add_done_callback(lambda f: done.append("x"))
            plan = ["server", "health", "daemon"] + ["server", "health"] * 4
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
        # the restart and most kills happened while sandboxes were starting
        assert events[0][1] < 50 and events[2] == ("daemon", events[2][1]) \
            and events[2][1] < 50, events
        assert sum(n < 50 for _, n in events) >= len(events) // 2, events
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
