"""The CNI implementations compared, all driven by the same real client.

Every call goes through cnitool on Debian's libcni 1.1 (the library
containerd 1.6/1.7 and podman 4 embed; :mod:`benchmarks.clients` builds
it), one process per call as a runtime execs plugins: libcni reads the
conflist, execs the plugin with ``CNI_*`` variables and the netconf on
stdin, and parses the result. So the comparison includes what a runtime
really pays (conflist load, exec, result parsing) and differs only in the
plugin:

- ``kuryr-cni (go)``: the compiled shim, built from ``cmd/kuryr-cni``;
- ``kuryr-cni (python)``: ``kuryr_supervisor/cni/shim.py`` copied alone and
  run through its shebang by the host's python3;
- reference: ``/usr/lib/cni/bridge`` with ``host-local`` IPAM on its own
  bridge and subnet, ``isGateway`` so the bridge holds the gateway address
  as kuryr-supervisor's does.

Both shims talk to the same real daemon (:class:`~benchmarks.harness.BenchDaemon`)
through the conflist we ship (``etc/cni/net.d/10-kuryr.conflist``, top-level
cniVersion 1.0.0), with only ``daemon_socket`` pointed at it.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import secrets
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks import clients
from benchmarks.harness import REPO, BenchDaemon, Workspace

HOST_PATH = "/usr/bin:/bin"
REFERENCE_DIR = "/usr/lib/cni"
CNI_VERSION = "1.0.0"
SHIPPED_CONFLIST = REPO / "etc" / "cni" / "net.d" / "10-kuryr.conflist"
COMMANDS = {"ADD": "add", "DEL": "del", "CHECK": "check"}


@dataclasses.dataclass
class Plugin:
    """One CNI implementation behind cnitool: its conflist and plugin dir."""

    name: str
    cnitool: Path
    network: str
    netconf_dir: Path
    cni_path: str
    cache_dir: Path
    args: str = ""              # CNI_ARGS ("K=V;K=V"), e.g. the pod's names


    def call(self, command: str, container_id: str, netns: str,
             ifname: str = "eth0") -> float:
        """Run one CNI command through cnitool; its wall time; raise on failure."""
        env = {"PATH": HOST_PATH, "NETCONFPATH": str(self.netconf_dir),
               "CNI_PATH": self.cni_path, "CNI_IFNAME": ifname,
               "CNI_CONTAINERID": container_id, "CNI_CACHE_DIR": str(self.cache_dir)}
        if self.args:
            env["CNI_ARGS"] = self.args
        argv = [str(self.cnitool), COMMANDS[command], self.network, netns]
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, text=True, capture_output=True,
                              timeout=180, check=False)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"{self.name} {command} {container_id}: rc={done.returncode} "
                               f"{done.stdout.strip()} {done.stderr.strip()}")
        return elapsed


def _write_conflist(directory: Path, conflist: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{conflist['name']}.conflist").write_text(json.dumps(conflist))


def cnitool(ws: Workspace) -> Path:
    """cnitool, built once per workspace."""
    path = ws.tmp / "cnitool-build" / "cnitool"
    if not path.exists():
        clients.build_cnitool(path.parent)
    return path


def kuryr(ws: Workspace, daemon: BenchDaemon, kind: str, tag: str = "") -> Plugin:
    """kuryr-cni of ``kind`` ("go" or "python") against ``daemon``; ``tag``
    keeps a second daemon's conflist and plugin directory apart."""
    bindir = ws.tmp / f"bin-{kind}{tag}"
    bindir.mkdir(exist_ok=True)
    shim = bindir / "kuryr-cni"
    if kind == "go":
        clients.build_go_shim(shim)
    else:
        source = ws.source / "kuryr_supervisor" / "cni" / "shim.py"
        if not source.exists():             # a --rev from before the layout
            source = ws.source / "kuryr_supervisor" / "shim.py"
        shutil.copyfile(source, shim)
    shim.chmod(0o755)
    conflist = json.loads(SHIPPED_CONFLIST.read_text())
    conflist["name"] = f"bench-{kind}{tag}"
    conflist["plugins"][0]["daemon_socket"] = f"unix://{daemon.socket_path}"
    netconf_dir = ws.tmp / f"net.d-{kind}{tag}"
    _write_conflist(netconf_dir, conflist)
    return Plugin(f"kuryr-cni ({kind})", cnitool(ws), conflist["name"], netconf_dir,
                  str(bindir), ws.tmp / "cni-cache")


def reference(ws: Workspace) -> Plugin:
    subnet = f"10.98.{secrets.randbelow(256)}.0/24"
    conflist = {"cniVersion": CNI_VERSION, "name": "bench-ref", "plugins": [
        {"type": "bridge", "bridge": ws.bridge("ksvbr"), "isGateway": True,
         "ipam": {"type": "host-local", "subnet": subnet,
                  "dataDir": str(ws.tmp / "host-local")}}]}
    netconf_dir = ws.tmp / "net.d-ref"
    _write_conflist(netconf_dir, conflist)
    return Plugin("bridge+host-local", cnitool(ws), "bench-ref", netconf_dir,
                  REFERENCE_DIR, ws.tmp / "cni-cache")


def pods(netns: list[str], tag: str) -> list[tuple[str, str]]:
    """(container id, netns path) pairs; fresh ids per round."""
    return [(f"{tag}{secrets.token_hex(16)}", path) for path in netns]


def burst(plugin: Plugin, pod_list: list[tuple[str, str]]) -> tuple[float, float]:
    """All ADDs at once, then all DELs at once: (ADD wall, DEL wall) seconds.

    One thread per pod, each exec'ing cnitool, as a runtime starting a
    ReplicaSet's pods on one node would.
    """
    with concurrent.futures.ThreadPoolExecutor(len(pod_list)) as pool:
        walls = []
        for command in ("ADD", "DEL"):
            start = time.perf_counter()
            futures = [pool.submit(plugin.call, command, cid, ns) for cid, ns in pod_list]
            errors = [f.exception() for f in futures]
            walls.append(time.perf_counter() - start)
            failed = [e for e in errors if e is not None]
            if failed:
                raise RuntimeError(f"{len(failed)} {command}s failed: {failed[0]}")
    return walls[0], walls[1]
