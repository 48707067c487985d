#!/usr/bin/env python3
"""CNI latency: kuryr-cni (shim -> daemon) against the reference plugins.

Both sides are invoked the same way a runtime does it: an executable, CNI_*
variables, the netconf on stdin, one fresh process per call.

- kuryr: the shim copied alone and run by the host's python3, talking to a
  CNI server subprocess (bounded threads, SQLite IPAM, pyroute2 binding);
- reference: Debian's ``/usr/lib/cni/bridge`` with ``host-local`` IPAM
  (CNI_PATH=/usr/lib/cni, dataDir in a temporary directory).

Each side gets its own bridge and subnet. Measured: median and p90 of 30
sequential ADDs and then 30 sequential DELs; wall time of 50 parallel ADDs
and then 50 parallel DELs. Run as root: ``python3 benchmarks/cni_latency.py``.
"""
from __future__ import annotations

import concurrent.futures
import functools
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST_PATH = "/usr/bin:/bin"
SEQUENTIAL, PARALLEL = 30, 50

SERVER = """
import ipaddress, os, sys
from kuryr_supervisor.cni.api import CNIApp
from kuryr_supervisor.binding import BridgeBinding
from kuryr_supervisor.cni.locks import ContainerLocks
from kuryr_supervisor.cni.service import CNIService
from kuryr_supervisor.cni.serving import CNIServer
from kuryr_supervisor.ipam import IpamStore
state_dir, sock, bridge, subnet = sys.argv[1:5]
ipam = IpamStore(os.path.join(state_dir, "ipam.sqlite"),
                 ipaddress.IPv4Network(subnet))
service = CNIService(lambda: ipam, BridgeBinding(bridge, 1500),
                     ContainerLocks(os.path.join(state_dir, "locks")), None)
server = CNIServer("unix://" + sock, CNIApp(service), max_concurrency=64)
print("ready", flush=True)
server.serve_forever(poll_interval=0.5)
"""

Invoke = Callable[[str, str, str], None]


def unique(prefix: str, length: int = 15) -> str:
    return prefix + secrets.token_hex(8)[:length - len(prefix)]


def run_plugin(argv: list[str], env: dict[str, str], netconf: dict[str, Any]) -> None:
    done = subprocess.run(argv, input=json.dumps(netconf), env=env, text=True,
                          capture_output=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} {env['CNI_COMMAND']}: {done.stdout} "
                           f"{done.stderr}")


def invoker(argv: list[str], netconf: dict[str, Any],
            extra_env: dict[str, str]) -> Invoke:
    def invoke(command: str, cid: str, netns: str) -> None:
        env = {"PATH": HOST_PATH, "CNI_COMMAND": command, "CNI_CONTAINERID": cid,
               "CNI_NETNS": netns, "CNI_IFNAME": "eth0", **extra_env}
        run_plugin(argv, env, netconf)
    return invoke


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(invoke: Invoke, namespaces: list[str]) -> dict[str, float]:
    pods = [(unique("b", 24), f"/var/run/netns/{ns}") for ns in namespaces]
    seq = pods[:SEQUENTIAL]
    adds = [timed(functools.partial(invoke, "ADD", *p)) for p in seq]
    dels = [timed(functools.partial(invoke, "DEL", *p)) for p in seq]
    pods = [(unique("p", 24), netns) for _, netns in pods[:PARALLEL]]
    with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
        par_add = timed(lambda: list(pool.map(lambda p: invoke("ADD", *p), pods)))
        par_del = timed(lambda: list(pool.map(lambda p: invoke("DEL", *p), pods)))
    q = statistics.quantiles
    return {"add_median": statistics.median(adds), "add_p90": q(adds, n=10)[-1],
            "del_median": statistics.median(dels), "del_p90": q(dels, n=10)[-1],
            "par_add_wall": par_add, "par_del_wall": par_del}


def main() -> int:
    if os.geteuid() != 0:
        print("needs root (netns, bridges)", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="ksvc-bench-")
    namespaces = [unique("ksvc-") for _ in range(max(SEQUENTIAL, PARALLEL))]
    kbridge, rbridge = unique("ksvcbr"), unique("ksvcbr")
    ksubnet = f"10.96.{secrets.randbelow(256)}.0/24"
    rsubnet = f"10.95.{secrets.randbelow(256)}.0/24"
    server = None
    try:
        for ns in namespaces:
            subprocess.run(["ip", "netns", "add", ns], check=True)
        shim = os.path.join(tmp, "kuryr-cni")
        shutil.copyfile(os.path.join(REPO, "kuryr_supervisor", "shim.py"), shim)
        os.chmod(shim, 0o755)
        sock = os.path.join(tmp, "run", "cni.sock")
        server = subprocess.Popen(
            [sys.executable, "-c", SERVER, os.path.join(tmp, "state"), sock,
             kbridge, ksubnet], cwd=REPO, env={**os.environ, "PYTHONPATH": REPO},
            stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None and server.stdout.readline() == "ready\n"
        kuryr = invoker([shim], {"cniVersion": "1.0.0", "name": "bench",
                                 "type": "kuryr-cni",
                                 "daemon_socket": f"unix://{sock}"}, {})
        reference = invoker(["/usr/lib/cni/bridge"], {
            "cniVersion": "1.0.0", "name": "bench-ref", "type": "bridge",
            "bridge": rbridge, "isGateway": True,
            "ipam": {"type": "host-local", "subnet": rsubnet,
                     "dataDir": os.path.join(tmp, "host-local")}},
            {"CNI_PATH": "/usr/lib/cni"})
        results = {"kuryr-cni": measure(kuryr, namespaces),
                   "bridge+host-local": measure(reference, namespaces)}
    finally:
        if server is not None:
            server.kill()
            server.wait()
        for bridge in (kbridge, rbridge):
            subprocess.run(["ip", "link", "del", bridge], capture_output=True)
        for ns in namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    k, r = results["kuryr-cni"], results["bridge+host-local"]
    print(f"{'metric':<16}{'kuryr-cni':>12}{'reference':>12}{'ratio':>8}")
    for key in k:
        print(f"{key:<16}{k[key] * 1000:>10.1f}ms{r[key] * 1000:>10.1f}ms"
              f"{k[key] / r[key]:>8.2f}")
    print(f"({os.cpu_count()} cores; sequential n={SEQUENTIAL}, "
          f"parallel n={PARALLEL}; ratio = kuryr-cni / reference)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
