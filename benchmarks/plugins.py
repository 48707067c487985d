"""The two CNI implementations compared, invoked exactly as a runtime does.

Both are an executable run once per call with ``CNI_*`` variables, the
netconf on stdin and a minimal ``PATH``, by the same code, so the comparison
only differs in what the plugin does:

- kuryr-supervisor: ``kuryr_supervisor/cni/shim.py`` copied alone to
  ``<tmp>/bin/kuryr-cni`` and run through its shebang by the host's python3,
  talking to a real daemon (:class:`~benchmarks.harness.BenchDaemon`);
- reference: ``/usr/lib/cni/bridge`` with ``host-local`` IPAM
  (``CNI_PATH=/usr/lib/cni``, ``dataDir`` in the workspace), on its own
  bridge and subnet, ``isGateway`` so the bridge holds the gateway address
  as kuryr-supervisor's does.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import secrets
import shutil
import subprocess
import time
from typing import Any

from benchmarks.harness import BenchDaemon, Workspace

HOST_PATH = "/usr/bin:/bin"
REFERENCE_DIR = "/usr/lib/cni"
CNI_VERSION = "1.0.0"


@dataclasses.dataclass
class Plugin:
    """One CNI implementation: its executable, netconf and extra env."""

    name: str
    argv: list[str]
    netconf: dict[str, Any]
    env: dict[str, str]

    def call(self, command: str, container_id: str, netns: str,
             ifname: str = "eth0") -> float:
        """Run one CNI command; return its wall time, raise on failure."""
        env = {"PATH": HOST_PATH, "CNI_COMMAND": command, "CNI_CONTAINERID": container_id,
               "CNI_NETNS": netns, "CNI_IFNAME": ifname, **self.env}
        start = time.perf_counter()
        done = subprocess.run(self.argv, input=json.dumps(self.netconf), env=env,
                              text=True, capture_output=True, timeout=180, check=False)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"{self.name} {command} {container_id}: rc={done.returncode} "
                               f"{done.stdout.strip()} {done.stderr.strip()}")
        return elapsed


def kuryr(ws: Workspace, daemon: BenchDaemon) -> Plugin:
    bindir = ws.tmp / "bin"
    bindir.mkdir(exist_ok=True)
    shim = bindir / "kuryr-cni"
    source = ws.source / "kuryr_supervisor" / "cni" / "shim.py"
    if not source.exists():             # a --rev from before the layout
        source = ws.source / "kuryr_supervisor" / "shim.py"
    shutil.copyfile(source, shim)
    shim.chmod(0o755)
    return Plugin("kuryr-cni", [str(shim)],
                  {"cniVersion": CNI_VERSION, "name": "bench", "type": "kuryr-cni",
                   "daemon_socket": f"unix://{daemon.socket_path}"},
                  {"CNI_PATH": str(bindir)})


def reference(ws: Workspace) -> Plugin:
    subnet = f"10.98.{secrets.randbelow(256)}.0/24"
    return Plugin("bridge+host-local", [f"{REFERENCE_DIR}/bridge"],
                  {"cniVersion": CNI_VERSION, "name": "bench-ref", "type": "bridge",
                   "bridge": ws.bridge("ksvbr"), "isGateway": True,
                   "ipam": {"type": "host-local", "subnet": subnet,
                            "dataDir": str(ws.tmp / "host-local")}},
                  {"CNI_PATH": REFERENCE_DIR})


def pods(netns: list[str], tag: str) -> list[tuple[str, str]]:
    """(container id, netns path) pairs; fresh ids per round."""
    return [(f"{tag}{secrets.token_hex(16)}", path) for path in netns]


def burst(plugin: Plugin, pod_list: list[tuple[str, str]]) -> tuple[float, float]:
    """All ADDs at once, then all DELs at once: (ADD wall, DEL wall) seconds.

    One thread per pod, each exec'ing the plugin, as a runtime starting a
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
