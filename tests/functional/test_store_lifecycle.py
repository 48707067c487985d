"""Replayable ADD and the store across restarts, with real processes.

- a real kuryr-supervisor daemon: ADD sent twice gives one veth and the
  same answer; SIGTERM leaves no ``ipam.sqlite-wal``; a new daemon on the
  same state adopts the attachments (replays their ADD, DELs them); a store
  written by a newer schema makes the daemon exit 78 with one line,
  changing nothing;
- a CNI server process SIGKILLed mid-ADD (by a hook after the veth exists,
  before the plumbing is recorded): the runtime's retried ADD rolls the
  half-done attachment back and succeeds, one veth, nothing leaked.
"""
from __future__ import annotations

import concurrent.futures
import ipaddress
import os
import pathlib
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from kuryr_supervisor.cni.binding import BridgeBinding
from kuryr_supervisor.cni.ipam import PENDING, PLUMBED, IpamStore, schema
from tests.fixtures.daemon import Daemon
from tests.functional.cni_harness import (
    Namespaces,
    delete_bridge,
    install_shim,
    ip_json,
    random_subnet,
    run_shim,
    unique,
)

pytestmark = pytest.mark.privileged

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def netconf(socket_path: str, version: str = "1.1.0") -> dict[str, Any]:
    return {"cniVersion": version, "name": "kuryr", "type": "kuryr-cni",
            "daemon_socket": f"unix://{socket_path}", "timeout": 30,
            "dns": {"nameservers": ["10.96.0.10"]}}


def host_veths(bridge: str) -> set[str]:
    return {p["ifname"] for p in ip_json("link", "show", "master", bridge)}


def pod_links(ns: str) -> list[str]:
    return sorted(link["ifname"] for link in ip_json("-n", ns, "link"))


def pod_address(ns: str) -> str | None:
    for link in ip_json("-n", ns, "addr"):
        if link["ifname"] == "eth0":
            for a in link["addr_info"]:
                if a["family"] == "inet":
                    return f"{a['local']}/{a['prefixlen']}"
    return None


def state_files(daemon: Daemon) -> list[str]:
    return sorted(os.listdir(daemon.options["ipam"]["state_dir"]))


@pytest.fixture
def daemon(tmp_path: pathlib.Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path)
    yield d
    d.close()


def test_replay_graceful_stop_and_adoption_by_a_new_daemon(
        daemon: Daemon, tmp_path: pathlib.Path,
        namespaces: Namespaces) -> None:
    shim = install_shim(str(tmp_path))
    sock = str(daemon.socket_path)
    bridge = str(daemon.options["binding"]["bridge"])
    ns, cid = namespaces.create(), unique("c", 20)
    netns = f"/var/run/netns/{ns}"
    daemon.start().wait_ready()
    status, first = run_shim(shim, "ADD", netconf(sock), container_id=cid,
                             netns=netns)
    assert status == 0, first
    # The same ADD again (a shim retrying after a lost answer): same answer,
    # in the retry's own cniVersion, still one veth.
    assert run_shim(shim, "ADD", netconf(sock), container_id=cid,
                    netns=netns) == (0, first)
    status, old = run_shim(shim, "ADD", netconf(sock, "0.3.1"),
                           container_id=cid, netns=netns)
    assert status == 0 and old["cniVersion"] == "0.3.1"
    assert old["ips"][0]["version"] == "4"
    assert old["ips"][0]["address"] == first["ips"][0]["address"]
    assert host_veths(bridge) == {BridgeBinding.host_ifname(cid, "eth0")}
    assert pod_links(ns) == ["eth0", "lo"]
    # Another netconf for the same attachment: 102, nothing changes.
    other = {**netconf(sock), "dns": {"nameservers": ["10.96.0.11"]}}
    status, err = run_shim(shim, "ADD", other, container_id=cid, netns=netns)
    assert (status, err["code"]) == (1, 102)
    assert host_veths(bridge) == {BridgeBinding.host_ifname(cid, "eth0")}

    assert os.path.exists(os.path.join(daemon.options["ipam"]["state_dir"],
                                       "ipam.sqlite-wal"))
    daemon.signal(15)
    assert daemon.wait_exit(30) == 0, daemon.log()
    files = state_files(daemon)
    assert "ipam.sqlite" in files
    assert not [f for f in files if f.endswith(("-wal", "-shm"))], files

    # A new daemon on the same state adopts the attachment: its ADD replays,
    # its DEL removes it.
    daemon.start().wait_ready()
    assert run_shim(shim, "ADD", netconf(sock), container_id=cid,
                    netns=netns) == (0, first)
    assert run_shim(shim, "DEL", netconf(sock), container_id=cid,
                    netns=netns) == (0, None)
    assert host_veths(bridge) == set() and pod_links(ns) == ["lo"]
    daemon.signal(15)
    assert daemon.wait_exit(30) == 0, daemon.log()
    assert not [f for f in state_files(daemon) if f.endswith("-wal")]


def test_store_of_a_newer_schema_exits_78_and_is_left_alone(
        daemon: Daemon) -> None:
    state_dir = str(daemon.options["ipam"]["state_dir"])
    os.makedirs(state_dir, mode=0o700)
    db = os.path.join(state_dir, "ipam.sqlite")
    store = IpamStore(db, ipaddress.IPv4Network(daemon.options["ipam"]["subnet"]))
    store.allocate("c1", "eth0", netns="/x", pod=store_pod())
    store.close(final=True)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(f"PRAGMA user_version = {schema.CURRENT + 7}")
    conn.close()
    before = pathlib.Path(db).read_bytes()
    proc = subprocess.run(
        [sys.executable, "-m", "kuryr_supervisor.daemon", "--config-file",
         str(daemon.config)], capture_output=True, text=True, timeout=60,
        cwd=REPO)
    assert proc.returncode == 78, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"schema version {schema.CURRENT + 7}" in lines[0]
    assert f"version {schema.CURRENT})" in lines[0]
    assert pathlib.Path(db).read_bytes() == before
    # nothing opened it: no -wal, no -shm, no journal
    assert [f for f in os.listdir(state_dir) if f.startswith("ipam")] == [
        "ipam.sqlite"]


def wal_only_version(db: str, scratch: pathlib.Path, version: int) -> None:
    """A store at ``db`` whose header says :data:`schema.CURRENT` and whose
    write-ahead log says ``version``: written by a connection that holds
    the log open (no checkpoint), the files copied before it closes."""
    scratch.mkdir(mode=0o700)
    source = str(scratch / "ipam.sqlite")
    IpamStore(source, ipaddress.IPv4Network("10.97.0.0/24")).close(final=True)
    keeper = sqlite3.connect(source, isolation_level=None)
    try:
        keeper.execute("PRAGMA journal_mode=WAL")
        keeper.execute("PRAGMA wal_autocheckpoint = 0")
        keeper.execute(f"PRAGMA user_version = {version}")
        for suffix in ("", "-wal"):
            shutil.copyfile(source + suffix, db + suffix)
    finally:
        keeper.close()
    header = pathlib.Path(db).read_bytes()[60:64]
    assert int.from_bytes(header, "big", signed=True) == schema.CURRENT


@pytest.mark.parametrize("version", [-1, -7, schema.CURRENT + 1])
def test_store_version_out_of_range_only_in_the_wal_exits_78(
        daemon: Daemon, tmp_path: pathlib.Path, version: int) -> None:
    """A version below 0 or above the newest, recorded only in the WAL
    (the header is fine): the master reads it through SQLite and refuses
    the store with one line, exit 78; check-config says the same."""
    state_dir = str(daemon.options["ipam"]["state_dir"])
    os.makedirs(state_dir, mode=0o700)
    db = os.path.join(state_dir, "ipam.sqlite")
    wal_only_version(db, tmp_path / "scratch", version)
    for command in ([], ["check-config"]):
        proc = subprocess.run(
            [sys.executable, "-m", "kuryr_supervisor.daemon", *command,
             "--config-file", str(daemon.config)], capture_output=True,
            text=True, timeout=30, cwd=REPO)
        assert proc.returncode == 78, (command, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert f"schema version {version}" in lines[0], lines
        assert db in lines[0]


def store_pod() -> Any:
    from kuryr_supervisor.cni.ipam import PodRef
    return PodRef("", "", "")


SERVER = """
import ipaddress, os, signal, sys
from kuryr_supervisor.cni import netlink
from kuryr_supervisor.cni.api import CNIApp
from kuryr_supervisor.cni.binding import BridgeBinding
from kuryr_supervisor.cni.locks import ContainerLocks
from kuryr_supervisor.cni.service import CNIService
from kuryr_supervisor.cni.serving import CNIServer
from kuryr_supervisor.cni.sockets import listen
from kuryr_supervisor.cni.ipam import IpamStore
state_dir, sock, bridge, subnet, die = sys.argv[1:6]
def dead(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
if die == "mid-plumb":          # the veth exists, unconfigured
    netlink.configure_pod = dead
ipam = IpamStore(os.path.join(state_dir, "ipam.sqlite"),
                 ipaddress.IPv4Network(subnet))
if die == "after-plumb":        # plumbed, the plumbing not yet recorded
    ipam.plumbed = dead
service = CNIService(lambda: ipam, BridgeBinding(bridge, 1400),
                     ContainerLocks(os.path.join(state_dir, "locks")), None)
server = CNIServer(listen("unix://" + sock), CNIApp(service),
                   max_concurrency=8)
print("ready", flush=True)
server.serve_forever(poll_interval=0.1)
"""


def start_server(state_dir: str, sock: str, bridge: str,
                 subnet: ipaddress.IPv4Network,
                 die: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, state_dir, sock, bridge, str(subnet),
         die], cwd=REPO, env={**os.environ, "PYTHONPATH": REPO},
        stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


@pytest.mark.parametrize("die", ["mid-plumb", "after-plumb"])
def test_add_retried_after_the_server_died_mid_add_is_repaired(
        tmp_path: pathlib.Path, namespaces: Namespaces, die: str) -> None:
    state_dir, sock = str(tmp_path / "state"), str(tmp_path / "run" / "cni.sock")
    bridge, subnet = unique("ksvcbr"), random_subnet()
    shim = install_shim(str(tmp_path))
    ns, cid = namespaces.create(), unique("c", 20)
    netns = f"/var/run/netns/{ns}"
    host = BridgeBinding.host_ifname(cid, "eth0")
    db = os.path.join(state_dir, "ipam.sqlite")
    try:
        proc = start_server(state_dir, sock, bridge, subnet, die)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            # The runtime's one ADD: the shim sees the connection closed
            # unanswered and keeps sending it again until a Server answers.
            call = pool.submit(run_shim, shim, "ADD", netconf(sock),
                               container_id=cid, netns=netns)
            assert proc.wait(20) == -9
            # What the dead Server left: a pending row and a veth in the pod.
            [stale] = IpamStore(db, subnet).list()
            assert stale.state == PENDING and stale.netns == netns
            assert host_veths(bridge) == {host} and "eth0" in pod_links(ns)
            assert pod_address(ns) == (str(stale.address)
                                       if die == "after-plumb" else None)
            assert not call.done()
            proc = start_server(state_dir, sock, bridge, subnet, "never")
            status, result = call.result(timeout=60)
        assert status == 0, result
        [now] = IpamStore(db, subnet).list()
        assert now.state == PLUMBED and now.address != stale.address
        assert result["ips"][0]["address"] == str(now.address)
        assert pod_address(ns) == str(now.address)
        assert host_veths(bridge) == {host} and pod_links(ns) == ["eth0", "lo"]
        assert run_shim(shim, "ADD", netconf(sock), container_id=cid,
                        netns=netns) == (0, result)
        assert run_shim(shim, "DEL", netconf(sock), container_id=cid,
                        netns=netns) == (0, None)
        assert IpamStore(db, subnet).list() == [] and host_veths(bridge) == set()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        delete_bridge(bridge)
