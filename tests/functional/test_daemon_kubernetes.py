"""The whole daemon in Kubernetes mode against a Kubernetes-API-shaped server
over real HTTP, and the CNI failure budget through real pod plumbing.

Real daemon process, real shim process (the copy the daemon installs), real
network namespaces.
"""
from __future__ import annotations

import ipaddress
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.cni.ipam import IpamStore
from tests.fixtures.daemon import Daemon, wait_until
from tests.fixtures.fakeapi import FakeAPI
from tests.functional.cni_harness import (
    Namespaces,
    delete_bridge,
    install_shim,
    ip_json,
    run_shim,
)

pytestmark = pytest.mark.privileged

NODE = "node-kt"


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    server = FakeAPI().start()
    yield server
    server.stop()


def metric(d: Daemon, name: str) -> float:
    body = d.get("/metrics")[1]
    match = re.search(rf"^kuryr_supervisor_{name} (\S+)$", body, re.M)
    assert match, body
    return float(match.group(1))


def netconf(d: Daemon) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "kuryr", "type": "kuryr-cni",
            "daemon_socket": f"unix://{d.socket_path}"}


def pod_args(namespace: str, name: str, uid: str) -> str:
    return (f"K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name};"
            f"K8S_POD_UID={uid}")


def host_veths(bridge: str) -> list[str]:
    return [link["ifname"] for link in ip_json("link", "show", "master", bridge)]


def test_kubernetes_mode(tmp_path: Path, api: FakeAPI, namespaces: Namespaces) -> None:
    cidr = ipaddress.IPv4Network(f"10.{random.randrange(200, 250)}."
                                 f"{random.randrange(256)}.0/24")
    api.add_node(NODE, pod_cidr=str(cidr))
    mine = api.add_pod("default", "web", NODE)
    api.add_pod("default", "elsewhere", "node-other")
    api.fail(500)   # start during an API outage
    bin_dir, conf_dir = tmp_path / "bin", tmp_path / "net.d"
    d = Daemon(tmp_path, {
        "kubernetes": {"api_root": api.url, "node_name": NODE,
                       "request_timeout": 1.0, "watch_timeout": 5,
                       "api_check_interval": 0.2, "api_check_timeout": 0.5,
                       "reclaim_interval": 0.5, "backoff_max": 0.5},
        "ipam": {"use_node_pod_cidr": True},
        "cni_install": {"enabled": True, "bin_dir": bin_dir,
                        "conf_dir": conf_dir},
        "health": {"node_condition_type": "KuryrCNIHealthy",
                   "node_condition_grace": 0.5},
    })
    try:
        d.start()
        wait_until(lambda: d.probe("/status") == 200, 20)
        # An API outage: not ready, never not alive, and nothing installed.
        code, body = wait_until(
            lambda: (lambda r: r if "k8s-api" in r[1] else None)(d.get("/ready?verbose")), 10)
        assert code == 503 and "[-]k8s-api" in body, body
        assert d.probe("/alive") == 200
        assert not bin_dir.exists() or not os.listdir(bin_dir)
        assert not conf_dir.exists() or not os.listdir(conf_dir)

        api.fail(None)
        d.wait_ready()
        shim = wait_until(lambda: (bin_dir / "kuryr-cni").exists()
                          and str(bin_dir / "kuryr-cni"), 5)
        conflist = json.loads(wait_until(
            lambda: (conf_dir / "10-kuryr.conflist").exists()
            and (conf_dir / "10-kuryr.conflist").read_text(), 5))
        assert conflist["plugins"][0]["type"] == "kuryr-cni"
        status = d.status()
        assert status["ready"], status

        # ADD through the installed shim: an address from the Node's podCIDR.
        ns = namespaces.create()
        code, result = run_shim(shim, "ADD", netconf(d), container_id="ctr-web",
                                netns=f"/var/run/netns/{ns}",
                                args=pod_args("default", "web",
                                              mine["metadata"]["uid"]))
        assert code == 0, result
        address = ipaddress.IPv4Interface(result["ips"][0]["address"])
        assert address.ip in cidr

        # A pod the API does not have, or another UID: PodGone, not counted.
        other = namespaces.create()
        for args in (pod_args("default", "ghost", "u-1"),
                     pod_args("default", "web", "not-the-uid")):
            code, err = run_shim(shim, "ADD", netconf(d), container_id="ctr-x",
                                 netns=f"/var/run/netns/{other}", args=args)
            assert code != 0 and err["code"] == 103, err
        assert metric(d, "cni_consecutive_failures") == 0
        assert d.probe("/alive") == 200

        # The pod deleted in the API while it holds an address: released.
        bridge = d.options["binding"]["bridge"]
        assert len(host_veths(bridge)) == 1
        api.delete_pod("default", "web")
        store_path = str(tmp_path / "state" / "ipam.sqlite")
        wait_until(lambda: not IpamStore(store_path, cidr).list(), 10)
        wait_until(lambda: not host_veths(bridge), 5)

        # The Node condition was published, True, once the daemon was healthy.
        conditions = [c for p in api.patches
                      for c in p.get("status", {}).get("conditions", [])
                      if c.get("type") == "KuryrCNIHealthy"]
        assert conditions and conditions[-1]["status"] == "True", api.patches

        # Every request names the node and the daemon's master, whichever
        # worker sent it: the Watcher's list and watch, the Server's pod
        # check, the HealthManager's probe and Node condition.
        agent = f"(cni; {NODE}; pid {d.pid})"
        sent = {(method, path.split("?")[0]) for _, method, path, _ in api.access}
        assert {("GET", "/api/v1/pods"), ("GET", "/readyz"),
                ("GET", "/api/v1/namespaces/default/pods/web"),
                ("PATCH", f"/api/v1/nodes/{NODE}/status")} <= sent, sent
        assert all(ua.startswith("kuryr-supervisor/") and ua.endswith(agent)
                   for _, _, _, ua in api.access), \
            {ua for _, _, _, ua in api.access}

        # A graceful stop leaves the store and the pod registry alone,
        # without -wal or -shm (the Watcher never closes the registry).
        d.signal(signal.SIGTERM)
        assert d.wait_exit(30) == 0, d.log()
        assert sorted(p.name for p in (tmp_path / "state").glob("*.sqlite*")
                      ) == ["ipam.sqlite", "pods.sqlite"]
    finally:
        d.close()


def test_cni_failure_budget(tmp_path: Path, namespaces: Namespaces) -> None:
    """Transient internal failures fail liveness after cni_failures_count;
    one successful ADD makes the daemon alive again."""
    d = Daemon(tmp_path, {"cni_daemon": {"cni_failures_count": 1}})
    bridge = d.options["binding"]["bridge"]
    shim = install_shim(str(tmp_path))
    try:
        d.start()
        d.wait_ready()
        # A transient internal failure: another writer holds the IPAM store
        # past SQLite's busy timeout, so the ADD fails inside the daemon
        # (code 100). (A bridge name taken by another kind of link is a
        # persistent environment fault: code 105, not counted.) One failure
        # is the budget here: each waits for SQLite's 10 s busy timeout.
        store = sqlite3.connect(os.path.join(d.options["ipam"]["state_dir"],
                                             "ipam.sqlite"),
                                isolation_level=None)
        store.execute("BEGIN IMMEDIATE")
        try:
            code, err = run_shim(shim, "ADD", netconf(d), container_id="c0",
                                 netns=f"/var/run/netns/{namespaces.create()}")
            assert code != 0 and err["code"] == 100, err
        finally:
            store.execute("ROLLBACK")
            store.close()
        code, body = wait_until(
            lambda: (lambda r: r if r[0] == 503 else None)(d.get("/alive")), 5)
        assert "cni-failures" in body, body
        assert d.probe("/ready") == 200   # readiness is not the budget's
        ns = namespaces.create()
        code, result = run_shim(shim, "ADD", netconf(d), container_id="c-ok",
                                netns=f"/var/run/netns/{ns}")
        assert code == 0, result
        wait_until(lambda: d.probe("/alive") == 200, 5)
        assert metric(d, "cni_consecutive_failures") == 0
        code, _ = run_shim(shim, "DEL", netconf(d), container_id="c-ok",
                           netns=f"/var/run/netns/{ns}")
        assert code == 0
    finally:
        d.close()
        delete_bridge(bridge)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True,
                       check=False)


def test_node_events_for_a_crash_loop(tmp_path: Path, api: FakeAPI) -> None:
    """SIGKILL the Server: an Event WorkerRestarted on the Node names it and
    the signal; killing it again patches the same Event's count instead of
    creating new ones."""
    node = "node-ev"
    api.add_node(node)
    d = Daemon(tmp_path, {"kubernetes": {
        "api_root": api.url, "node_name": node, "request_timeout": 1.0,
        "api_check_interval": 0.2, "api_check_timeout": 0.5}})

    def restarts() -> list[dict[str, Any]]:
        return [e for e in list(api.core_events.values())
                if e["reason"] == "WorkerRestarted"]
    try:
        d.start()
        d.wait_ready()
        wait_until(lambda: any(e["reason"] == "Ready"
                               for e in list(api.core_events.values())), 10)
        for kill in range(3):
            old = d.worker_pids()["server"]
            os.kill(old, signal.SIGKILL)
            wait_until(lambda n=kill + 1: sum(e.get("count", 1)
                                              for e in restarts()) == n, 20)
            wait_until(lambda old=old: d.probe("/status") == 200 and
                       d.worker_pids()["server"] not in (0, old), 10)
        (event,) = restarts()
        assert event["count"] == 3, event
        assert event["involvedObject"]["kind"] == "Node"
        assert event["involvedObject"]["name"] == node
        assert event["source"]["component"] == "kuryr-supervisor"
        assert event["type"] == "Warning"
        message = event["message"]
        assert message.startswith("Server worker (pid ") and "SIGKILL" in message
        assert "back as pid" in message and "restart #3" in message
        posts = [m for m, _ in api.event_calls]
        assert posts.count("PATCH") >= 2
    finally:
        d.close()
