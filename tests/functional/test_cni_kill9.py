"""SIGKILL of the server in the middle of a burst of ADDs, then GC: no
address and no veth may leak, and the restarted server replaces the stale
socket on its own."""
from __future__ import annotations

import concurrent.futures
import ipaddress
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from kuryr_supervisor.cni.binding import BridgeBinding
from kuryr_supervisor.cni.ipam import IpamStore
from tests.functional.cni_harness import (
    Namespaces,
    delete_bridge,
    install_shim,
    ip,
    ip_json,
    random_subnet,
    run_shim,
    unique,
)

pytestmark = pytest.mark.privileged

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SERVER = """
import ipaddress, os, sys
from kuryr_supervisor.cni.api import CNIApp
from kuryr_supervisor.cni.binding import BridgeBinding
from kuryr_supervisor.cni.locks import ContainerLocks
from kuryr_supervisor.cni.service import CNIService
from kuryr_supervisor.cni.serving import CNIServer
from kuryr_supervisor.cni.ipam import IpamStore
state_dir, sock, bridge, subnet = sys.argv[1:5]
ipam = IpamStore(os.path.join(state_dir, "ipam.sqlite"),
                 ipaddress.IPv4Network(subnet))
service = CNIService(lambda: ipam, BridgeBinding(bridge, 1400),
                     ContainerLocks(os.path.join(state_dir, "locks")), None)
from kuryr_supervisor.cni.sockets import listen
server = CNIServer(listen("unix://" + sock), CNIApp(service), max_concurrency=64)
print("ready", flush=True)
server.serve_forever(poll_interval=0.1)
"""


def start_server(state_dir: str, sock: str, bridge: str,
                 subnet: ipaddress.IPv4Network) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, state_dir, sock, bridge, str(subnet)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": REPO},
        stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_kill9_during_adds_then_gc_leaks_nothing(tmp_path: Any,
                                                 namespaces: Namespaces) -> None:
    state_dir, sock = str(tmp_path / "state"), str(tmp_path / "run" / "cni.sock")
    bridge, subnet = unique("ksvcbr"), random_subnet()
    shim_path = install_shim(str(tmp_path))
    conf = {"cniVersion": "1.1.0", "name": "kuryr", "type": "kuryr-cni",
            "daemon_socket": f"unix://{sock}", "timeout": 30}
    pods = [(f"/var/run/netns/{namespaces.create()}", unique("c", 20))
            for _ in range(40)]
    server = start_server(state_dir, sock, bridge, subnet)
    try:
        def add(pod: tuple[str, str]) -> tuple[str, int, Any]:
            netns, cid = pod
            status, body = run_shim(shim_path, "ADD", conf, container_id=cid,
                                    netns=netns)
            return cid, status, body

        with concurrent.futures.ThreadPoolExecutor(40) as pool:
            futures = [pool.submit(add, pod) for pod in pods]
            deadline = time.monotonic() + 60
            while (sum(f.done() for f in futures) < 5
                   and time.monotonic() < deadline):
                time.sleep(0.002)
            server.send_signal(signal.SIGKILL)
            server.wait(10)
            results = [f.result() for f in futures]

        ok = {cid for cid, status, _ in results if status == 0}
        failed = {cid for cid, status, _ in results if status != 0}
        assert ok and failed, results           # the kill landed mid-burst
        assert all(body["code"] == 11 for _, status, body in results if status)

        store = IpamStore(os.path.join(state_dir, "ipam.sqlite"), subnet)
        server = start_server(state_dir, sock, bridge, subnet)   # stale socket
        valid = [{"containerID": cid, "ifname": "eth0"} for cid in sorted(ok)]
        status, body = run_shim(shim_path, "GC", {
            **conf, "cni.dev/valid-attachments": valid})
        assert (status, body) == (0, None)

        assert {a.container_id for a in store.list()} == ok
        hosts = {link["ifname"] for link in ip_json("link")}
        for cid in failed:
            assert BridgeBinding.host_ifname(cid, "eth0") not in hosts
        ports = {p["ifname"] for p in ip_json("link", "show", "master", bridge)}
        assert ports == {BridgeBinding.host_ifname(cid, "eth0") for cid in ok}
        for netns, cid in pods:
            names = {link["ifname"] for link in ip_json(
                "-n", os.path.basename(netns), "link")}
            assert names == ({"lo", "eth0"} if cid in ok else {"lo"}), (cid, names)

        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            dels = list(pool.map(lambda p: run_shim(
                shim_path, "DEL", conf, container_id=p[1], netns=p[0]), pods))
        assert all(d == (0, None) for d in dels)
        assert store.list() == []
        assert ip_json("link", "show", "master", bridge) == []
        store.close()
    finally:
        server.kill()
        server.wait(10)
        delete_bridge(bridge)
        ip("link", "del", bridge, check=False)
