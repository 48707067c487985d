"""Real runtimes during recovery: cnitool (Debian's libcni 1.1) and
``podman run`` succeed while the Server is SIGKILLed and while the whole
daemon is restarted.

A real daemon process (master and workers, ``tests/fixtures/daemon.py``);
the client call is started first, then, at once:

- ``server``: the Server worker is SIGKILLed. Whatever the call was doing
  (not yet connected: it waits in the master's listen backlog; accepted by
  the dying Server: the shim sees the connection closed and sends it again,
  and the ADD is replayed or its half-done attachment rolled back and
  redone), the runtime must get a result;
- ``daemon``: the daemon is stopped (SIGTERM, exit 0) and started again a
  moment later on the same configuration and state, as a restart or an
  upgrade does: the call waits in the shim's retry.

Then the client's DEL, and nothing left: no address in the store, no port
on the bridge. Only outcomes are asserted, never how long anything took.
"""
from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kuryr_supervisor.cni.ipam import IpamStore
from tests.fixtures.daemon import Daemon, wait_until
from tests.fixtures.netns import add_netns
from tests.functional.cni_harness import ip_json
from tests.functional.test_cnitool import SHIPPED, Cnitool
from tests.functional.test_podman import RUN_FLAGS, Podman, podman  # noqa: F401

pytestmark = pytest.mark.privileged
GAP = 0.5                      # seconds the daemon stays down


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    (tmp_path / "daemon").mkdir()
    d = Daemon(tmp_path / "daemon", {"supervisor": {"restart_backoff_max": 0.5,
                                                    "max_restarts": 1000}})
    d.start()
    try:
        d.wait_ready(60)
        yield d
    finally:
        for port in ip_json("link", "show", "master", str(d.options["binding"]["bridge"])):
            subprocess.run(["ip", "link", "del", port["ifname"]], check=False)
        d.close()


def allocated(daemon: Daemon) -> list[str]:
    path = os.path.join(str(daemon.options["ipam"]["state_dir"]), "ipam.sqlite")
    store = IpamStore(path, ipaddress.IPv4Network(str(daemon.options["ipam"]["subnet"])))
    try:
        return [str(a.address) for a in store.list()]
    finally:
        store.close()


def bridge_ports(daemon: Daemon) -> list[str]:
    return [p["ifname"] for p in
            ip_json("link", "show", "master", str(daemon.options["binding"]["bridge"]))]


def break_it(daemon: Daemon, how: str) -> None:
    """SIGKILL the Server, or restart the daemon (SIGTERM, then start)."""
    if how == "server":
        server = daemon.worker_pids()["server"]
        os.kill(server, signal.SIGKILL)
        wait_until(lambda: _server(daemon) not in (0, server), 60, interval=0.05)
        return
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit(60) == 0, daemon.log()
    time.sleep(GAP)
    daemon.start()


def _server(daemon: Daemon) -> int:
    try:
        return daemon.worker_pids()["server"]
    except (OSError, AssertionError, KeyError, ValueError):
        return 0


def install(daemon: Daemon, root: Path, shim: str, name: str = "kuryr") -> None:
    """The shipped conflist pointed at ``daemon``; ``shim`` in ``root/bin``."""
    for sub in ("bin", "net.d"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    target = root / "bin" / "kuryr-cni"
    target.write_bytes(Path(shim).read_bytes())
    target.chmod(0o755)
    conflist = json.loads(SHIPPED.read_text())
    conflist["name"] = name
    conflist["plugins"][0]["daemon_socket"] = f"unix://{daemon.socket_path}"
    (root / "net.d" / f"{name}.conflist").write_text(json.dumps(conflist))


@pytest.mark.parametrize("how", ["server", "daemon"])
def test_cnitool_add_during_recovery(cnitool: Path, daemon: Daemon, tmp_path: Path,
                                     shim_factory: Callable[[str], str],
                                     how: str) -> None:
    root = tmp_path / "host"
    install(daemon, root, shim_factory(str(tmp_path)))
    tool = Cnitool(cnitool, root)
    ns = f"ksvr{os.getpid() % 10000}{how[0]}"
    add_netns(ns)
    try:
        adding = tool.start("add", f"/var/run/netns/{ns}")
        try:
            break_it(daemon, how)
            out, err = adding.communicate(timeout=120)
        finally:
            if adding.poll() is None:
                adding.kill()
                adding.wait(5)
        assert adding.returncode == 0, f"{err}\n{daemon.log()[-3000:]}"
        (ip,) = json.loads(out)["ips"]
        addrs = [f"{a['local']}/{a['prefixlen']}" for link in ip_json("-n", ns, "addr")
                 if link["ifname"] == "eth0" for a in link["addr_info"]
                 if a["family"] == "inet"]
        assert addrs == [ip["address"]]
        daemon.wait_ready(60)
        assert allocated(daemon) == [ip["address"]]
        assert len(bridge_ports(daemon)) == 1
        done = tool("del", f"/var/run/netns/{ns}")
        assert done.returncode == 0, done.stderr
        assert allocated(daemon) == [] and bridge_ports(daemon) == []
        assert daemon.status()["cniFailures"] == 0
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


@pytest.mark.parametrize("how", ["server", "daemon"])
def test_podman_run_during_recovery(podman: tuple[Podman, str],  # noqa: F811
                                    daemon: Daemon, go_shim: Path, how: str) -> None:
    pod, image = podman
    network = f"ksvr-{how}"
    install(daemon, pod.root, str(go_shim), network)
    subnet = ipaddress.IPv4Network(str(daemon.options["ipam"]["subnet"]))
    gateway = str(subnet.network_address + 1)
    running = subprocess.Popen(
        [*pod.base, "run", "--rm", "--network", network, *RUN_FLAGS, image,
         "/bin/sh", "-c", f"ip -4 -o addr show dev eth0 && ping -c 1 -W 2 {gateway}"],
        env=pod.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        break_it(daemon, how)
        out, err = running.communicate(timeout=180)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait(5)
    assert running.returncode == 0, f"{out}\n{err}\n{daemon.log()[-3000:]}"
    assert "1 packets received" in out, out
    inet = [w for w in out.split() if "/" in w and w[0].isdigit()]
    assert inet and ipaddress.IPv4Interface(inet[0]).ip in subnet, out
    # --rm: podman's DEL released everything
    daemon.wait_ready(60)
    assert allocated(daemon) == [] and bridge_ports(daemon) == []
    assert daemon.status()["cniFailures"] == 0
