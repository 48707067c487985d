"""Persistent environment faults fail readiness by name and are not counted.

Against a real daemon: a corrupt IPAM store, a full state disk (a small
tmpfs mounted for the test), a bridge name taken by another kind of link.
Each must make ``/ready`` fail naming the cause while ``/alive`` stays 200
however many ADDs fail (before, each failed ADD counted and three made
``/alive`` fail: the kubelet restarted the daemon into the same fault), must
not kill or restart the Server (no SIGBUS from SQLite on the full disk), and
must clear by itself once the operator fixed the cause. Also: a subnet
change on restart leaves only the new gateway on the bridge.
"""
from __future__ import annotations

import contextlib
import ipaddress
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from drills.common import Workspace, ip, ip_json, stop
from tests.fixtures.daemon import Daemon, wait_until

pytestmark = pytest.mark.privileged

FAULT_CODE = 105
ADDS = 5            # more than the default cni_failures_count (3)


@pytest.fixture
def ws() -> Iterator[Workspace]:
    with Workspace("faults") as workspace:
        yield workspace


def restarts(daemon: Daemon) -> int:
    return sum(int(c["restarts"]) for c in daemon.status()["components"].values())


def ready_names(daemon: Daemon, text: str) -> bool:
    try:
        code, body = daemon.get("/ready?verbose")
    except OSError:             # not listening yet
        return False
    return code == 503 and "[-]cni-environment" in body and text in body


def failing_adds(ws: Workspace, daemon: Daemon, netns: str) -> list[Any]:
    codes = []
    for i in range(ADDS):
        call = ws.shim("ADD", ws.netconf(daemon), container_id=f"ksvxf{i}",
                       netns=netns)
        codes.append(call.code if call.status else 0)
    return codes


def assert_not_counted(daemon: Daemon, restarts_before: int) -> None:
    assert daemon.probe("/alive") == 200, daemon.get("/alive?verbose")
    status = daemon.status()
    assert status["checks"]["cni-failures"]["state"] == "ok", status["checks"]
    assert restarts(daemon) == restarts_before, daemon.log()


def add_works(ws: Workspace, daemon: Daemon, netns: str) -> None:
    call = ws.shim("ADD", ws.netconf(daemon), container_id="ksvxok", netns=netns)
    assert call.status == 0, call.stdout
    ws.shim("DEL", ws.netconf(daemon), container_id="ksvxok", netns=netns)


def test_corrupt_store_fails_ready_and_startup_not_alive(ws: Workspace) -> None:
    daemon = ws.daemon()
    state_dir = str(daemon.options["ipam"]["state_dir"])
    os.makedirs(state_dir)
    db = os.path.join(state_dir, "ipam.sqlite")
    with open(db, "wb") as f:
        f.write(b"garbage, not a database " * 200)
    ws.start(daemon)
    wait_until(lambda: daemon.probe("/alive") == 200, 20)
    wait_until(lambda: ready_names(daemon, "IPAM store"), 10)
    assert daemon.probe("/startup") == 503
    netns = ws.netns()
    before = restarts(daemon)
    assert failing_adds(ws, daemon, netns) == [FAULT_CODE] * ADDS
    assert_not_counted(daemon, before)
    os.rename(db, db + ".corrupt")              # what /status tells to do
    wait_until(lambda: daemon.probe("/ready") == 200, 10)
    add_works(ws, daemon, netns)
    assert stop(daemon) == 0


@contextlib.contextmanager
def small_tmpfs(path: str, size: str = "2m") -> Iterator[str]:
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700",
                    "ksvx-full", path], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", path], check=False)


def fill(path: str) -> str:
    filler = os.path.join(path, "filler")
    with open(filler, "wb") as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
                f.flush()
    return filler


def test_full_state_disk_fails_ready_and_recovers(ws: Workspace) -> None:
    daemon = ws.daemon()
    state_dir = str(daemon.options["ipam"]["state_dir"])
    with small_tmpfs(state_dir):
        ws.start(daemon)
        daemon.wait_ready()
        netns = ws.netns()
        add_works(ws, daemon, netns)
        before = restarts(daemon)
        server_pid = daemon.worker_pids()["server"]
        filler = fill(state_dir)
        wait_until(lambda: ready_names(daemon, "full or read-only"), 10)
        codes = failing_adds(ws, daemon, netns)
        assert set(codes) <= {0, FAULT_CODE}, codes   # never 100
        assert_not_counted(daemon, before)
        assert daemon.worker_pids()["server"] == server_pid   # no SIGBUS
        for i, code in enumerate(codes):
            if code == 0:
                ws.shim("DEL", ws.netconf(daemon), container_id=f"ksvxf{i}",
                        netns=netns)
        os.unlink(filler)
        wait_until(lambda: daemon.probe("/ready") == 200, 10)
        add_works(ws, daemon, netns)
        assert stop(daemon) == 0


def test_bridge_name_taken_by_another_link_kind(ws: Workspace) -> None:
    daemon = ws.daemon()
    bridge = str(daemon.options["binding"]["bridge"])
    ip("link", "add", bridge, "type", "veth", "peer", "name", bridge + "p",
       check=True)
    try:
        ws.start(daemon)
        wait_until(lambda: ready_names(daemon, f"bridge {bridge} exists"), 20)
        netns = ws.netns()
        before = restarts(daemon)
        assert failing_adds(ws, daemon, netns) == [FAULT_CODE] * ADDS
        assert_not_counted(daemon, before)
    finally:
        ip("link", "del", bridge)
    wait_until(lambda: daemon.probe("/ready") == 200, 10)
    add_works(ws, daemon, netns)
    assert stop(daemon) == 0


def test_subnet_change_leaves_only_the_new_gateway(ws: Workspace) -> None:
    daemon = ws.daemon({"ipam": {"subnet": "10.251.7.0/24"}})
    netns = ws.netns()
    ws.start(daemon)
    daemon.wait_ready()
    add_works(ws, daemon, netns)
    assert stop(daemon) == 0
    daemon.options["ipam"]["subnet"] = "10.251.9.0/24"
    daemon.write_config()
    ws.start(daemon)
    daemon.wait_ready()
    add_works(ws, daemon, netns)
    bridge = str(daemon.options["binding"]["bridge"])
    addresses = [ipaddress.IPv4Interface(f"{a['local']}/{a['prefixlen']}")
                 for link in ip_json("-4", "addr", "show", "dev", bridge)
                 for a in link.get("addr_info", [])]
    assert addresses == [ipaddress.IPv4Interface("10.251.9.1/24")]
    assert stop(daemon) == 0


def test_no_net_admin_fails_ready_not_alive(ws: Workspace) -> None:
    """Started without CAP_NET_ADMIN (bounding set dropped by setpriv, as a
    DaemonSet without the capability would be): every ADD fails with 105
    and is not counted, /ready names the missing capability."""
    daemon = ws.daemon()
    log = open(daemon.log_path, "ab")
    daemon.proc = subprocess.Popen(
        ["setpriv", "--inh-caps=-net_admin", "--bounding-set=-net_admin", "--",
         sys.executable, "-m", "kuryr_supervisor.daemon",
         "--config-file", str(daemon.config)],
        stdout=log, stderr=subprocess.STDOUT)
    log.close()
    ws.sessions.add(daemon.pid)
    wait_until(lambda: daemon.probe("/alive") == 200, 20)
    netns = ws.netns()
    before = restarts(daemon)
    assert failing_adds(ws, daemon, netns) == [FAULT_CODE] * ADDS
    assert_not_counted(daemon, before)
    wait_until(lambda: ready_names(daemon, "CAP_NET_ADMIN"), 10)
    assert stop(daemon) == 0
