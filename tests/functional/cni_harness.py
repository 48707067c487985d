"""A real CNI data path for functional tests, private to one test.

Every resource carries a random suffix so runs of several engineers on one
host never collide: namespaces ``ksvc-<hex>``, bridge ``ksvcbr<hex>``, a
random /24 in 10.96.0.0/16, a temporary state directory and socket path.

The server runs in-process (a thread); the shim runs as a subprocess, copied
alone into a temporary directory and executed through its shebang with the
host's ``python3`` (PATH=/usr/bin:/bin), exactly as a runtime would.
"""
from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import multiprocessing
import os
import secrets
import shutil
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

from kuryr_supervisor.cni import protocol, shim, sockets
from kuryr_supervisor.cni.api import CNIApp
from kuryr_supervisor.cni.binding import BridgeBinding
from kuryr_supervisor.cni.ipam import IpamStore
from kuryr_supervisor.cni.locks import ContainerLocks
from kuryr_supervisor.cni.service import CNIService
from kuryr_supervisor.cni.serving import CNIServer
from kuryr_supervisor.state import SharedState
from tests.fixtures.netns import add_netns

HOST_PATH = "/usr/bin:/bin"


def unique(prefix: str, length: int = 15) -> str:
    return prefix + secrets.token_hex(8)[:length - len(prefix)]


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True,
                          text=True)


def ip_json(*args: str) -> Any:
    done = ip("-j", *args, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        return []
    return json.loads(done.stdout)


def random_subnet() -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(f"10.96.{secrets.randbelow(256)}.0/24")


def install_shim(directory: str) -> str:
    """Copy the shim alone to ``directory/kuryr-cni``; return its path."""
    path = os.path.join(directory, "kuryr-cni")
    shutil.copyfile(shim.__file__, path)
    os.chmod(path, 0o755)
    return path


@dataclasses.dataclass
class Namespaces:
    names: list[str] = dataclasses.field(default_factory=list)

    def create(self) -> str:
        name = unique("ksvc-")
        add_netns(name)
        self.names.append(name)
        return name

    def cleanup(self) -> None:
        for name in self.names:
            ip("netns", "del", name, check=False)


def delete_bridge(bridge: str) -> None:
    for port in ip_json("link", "show", "master", bridge):
        ip("link", "del", port["ifname"], check=False)
    ip("link", "del", bridge, check=False)


@dataclasses.dataclass
class Daemon:
    """Handles on one running CNI server and what it works on."""

    tmp: str
    socket_path: str
    subnet: ipaddress.IPv4Network
    bridge: str
    state: SharedState
    ipam: IpamStore
    server: CNIServer
    shim_path: str
    mtu: int = 1400

    @property
    def address(self) -> str:
        return f"unix://{self.socket_path}"

    def netconf(self, version: str = "1.1.0",
                extra: dict[str, Any] | None = None) -> dict[str, Any]:
        conf = {"cniVersion": version, "name": "kuryr", "type": "kuryr-cni",
                "daemon_socket": self.address,
                "dns": {"nameservers": ["10.96.0.10"]}}
        conf.update(extra or {})
        return conf

    def shim(self, command: str, netconf: dict[str, Any] | str, *,
             container_id: str = "", netns: str = "", ifname: str = "eth0",
             args: str = "", timeout: float = 60,
             extra_env: dict[str, str] | None = None
             ) -> tuple[int, Any]:
        return run_shim(self.shim_path, command, netconf,
                        container_id=container_id, netns=netns, ifname=ifname,
                        args=args, timeout=timeout, extra_env=extra_env)

    def files(self) -> dict[str, bytes]:
        """Every file under the state dir with its contents (for "nothing
        changed on disk" assertions; the SQLite WAL is checkpointed first)."""
        self.ipam.close()
        out = {}
        for root, _, names in os.walk(os.path.join(self.tmp, "state")):
            for name in names:
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    out[os.path.relpath(path, self.tmp)] = f.read()
        return out


def run_shim(shim_path: str, command: str, netconf: dict[str, Any] | str, *,
             container_id: str = "", netns: str = "", ifname: str = "eth0",
             args: str = "", timeout: float = 60,
             extra_env: dict[str, str] | None = None) -> tuple[int, Any]:
    env = {"PATH": HOST_PATH, "CNI_COMMAND": command, "CNI_PATH": "/opt/cni/bin"}
    if container_id:
        env["CNI_CONTAINERID"] = container_id
    if netns:
        env["CNI_NETNS"] = netns
    if ifname:
        env["CNI_IFNAME"] = ifname
    if args:
        env["CNI_ARGS"] = args
    env.update(extra_env or {})
    stdin = netconf if isinstance(netconf, str) else json.dumps(netconf)
    done = subprocess.run([shim_path], input=stdin, env=env, text=True,
                          capture_output=True, timeout=timeout)
    out = done.stdout.strip()
    return done.returncode, json.loads(out) if out else None


@contextlib.contextmanager
def running_daemon(tmp: str, *, subnet: ipaddress.IPv4Network | None = None,
                   max_concurrency: int = 64, mtu: int = 1400,
                   max_request_bytes: int = 1 << 20) -> Iterator[Daemon]:
    """Start an in-process CNI server on a fresh bridge and socket."""
    subnet = subnet or random_subnet()
    bridge = unique("ksvcbr")
    state_dir = os.path.join(tmp, "state")
    state = SharedState.create(multiprocessing.get_context("fork"))
    ipam = IpamStore(os.path.join(state_dir, "ipam.sqlite"), subnet)
    service = CNIService(lambda: ipam, BridgeBinding(bridge, mtu),
                         ContainerLocks(os.path.join(state_dir, "locks")),
                         state, lock_timeout=30,
                         netns_guard=protocol.host_netns_guard)
    socket_path = os.path.join(tmp, "run", "cni.sock")
    # As in the daemon, the socket is bound outside the server, which keeps
    # its own duplicate.
    with sockets.listen(f"unix://{socket_path}") as listener:
        server = CNIServer(listener,
                           CNIApp(service, max_request_bytes=max_request_bytes),
                           max_concurrency=max_concurrency, request_timeout=30,
                           state=state)
    thread = threading.Thread(target=server.serve_forever,
                              kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield Daemon(tmp=tmp, socket_path=socket_path, subnet=subnet,
                     bridge=bridge, state=state, ipam=ipam, server=server,
                     shim_path=install_shim(tmp), mtu=mtu)
    finally:
        server.stop_accepting()
        thread.join(5)
        ipam.close()
        delete_bridge(bridge)
