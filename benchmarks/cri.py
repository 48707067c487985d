"""Benchmark ``cri`` — the kubelet's path: RunPodSandbox and
Stop+RemovePodSandbox through containerd 1.6's CRI, our plugin against the
reference.

One private containerd (``tests/fixtures/containerd``: its own root and
socket, in a network namespace playing the node, a pause image built
locally) serves both networks in turn, in the same run: ``kuryr-cni`` (the
compiled shim, installed with the conflist by our installer) in front of a
standalone daemon running in the node, and Debian's ``bridge`` +
``host-local`` (``isGateway``, its own bridge and subnet). containerd
reloads ``conf_dir`` on change, so switching is a file write and a wait
until its Status names the network.

Each round: 20 pods one after the other, the implementations taking turns
pod by pod (so a moment of load on this shared machine falls on both), each
pod RunPodSandbox then Stop+Remove; then 20 at once (20 threads: 20 Runs,
then 20 Stop+Removes) for each implementation, the order rotating per
round. A RunPodSandbox sample is the whole CRI call (netns, CNI ADD of
loopback and the network, the pause container); Stop+Remove is both calls
(both DELs, the container's end). p50 and p99 over every round's samples.

Goal: p50 <= 1.0x the reference for Run and for Stop+Remove, sequential and
parallel; p99 is quoted without a goal.

Where the time goes (no goal; these say whether a gap is ours): containerd's
own timer of the CNI part (``network_plugin_operations_duration_seconds``,
set-up and tear-down, from its metrics endpoint on the node's loopback), the
CPU spent on the CNI path per pod (the plugin processes containerd exec'd,
plus, for ours, the daemon's process tree), and the daemon's mean time per
ADD and DEL from its own histogram. The rest of a RunPodSandbox (netns,
snapshot, runc, the pause process) is containerd's and the same for both.
"""
from __future__ import annotations

import concurrent.futures
import json
import secrets
import time
from collections.abc import Callable

import psutil

from benchmarks import clients
from benchmarks.context import Context, Outcome
from benchmarks.stats import Figure, percentile
from tests.fixtures.containerd import (
    CriNode,
    NodeDaemon,
    install_network,
    running_cri_node,
    wait_network,
)

NAME = "cri"
OURS, REFERENCE = "kuryr-cni (go)", "bridge+host-local"
PHASES = ("Run", "Stop+Remove")


class Network:
    """One implementation's conflist, written into containerd's conf_dir."""

    def __init__(self, label: str, install: Callable[[], str]) -> None:
        self.label, self.install = label, install

    def use(self, node: CriNode) -> None:
        node.clear_networks()
        wait_network(node.cri, self.install())


def _ours(node: CriNode, ctx: Context) -> tuple[Network, NodeDaemon]:
    shim = ctx.ws.tmp / "cri-shim" / "kuryr-cni"
    shim.parent.mkdir(exist_ok=True)
    clients.build_go_shim(shim)
    (ctx.ws.tmp / "cri-daemon").mkdir()
    daemon = NodeDaemon(node.node, ctx.ws.tmp / "cri-daemon",
                        {"ipam": {"subnet": f"10.95.{secrets.randbelow(256)}.0/24"}})
    for test_only in ("supervisor", "health"):     # production defaults
        daemon.options.pop(test_only, None)
    daemon.write_config()
    daemon.start()
    daemon.wait_ready(60)

    def install() -> str:
        install_network(node, daemon, "bench-kuryr", compiled=shim)
        return "bench-kuryr"
    return Network(OURS, install), daemon


def _reference(node: CriNode) -> Network:
    subnet = f"10.94.{secrets.randbelow(256)}.0/24"
    conflist = {"cniVersion": "1.0.0", "name": "bench-ref", "plugins": [{
        "type": "bridge", "bridge": f"ksvbr{secrets.token_hex(4)}", "isGateway": True,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]],
                 "dataDir": str(node.workdir / "host-local")}}]}

    def install() -> str:
        (node.conf_dir / "10-ref.conflist").write_text(json.dumps(conflist))
        return "bench-ref"
    return Network(REFERENCE, install)


def measure(node: CriNode, count: int, parallel: bool, tag: str) -> dict[str, list[float]]:
    """Run ``count`` sandboxes, then stop and remove them: seconds per call."""
    cri = node.cri
    cgroup = node.containerd.cgroup_parent
    ids: list[str] = []

    def run(i: int) -> float:
        start = time.perf_counter()
        sandbox = cri.run(f"{tag}-{i}", "bench", f"{tag}-uid-{i}", cgroup_parent=cgroup,
                          labels={"ksvb": tag})
        ids.append(sandbox)
        return time.perf_counter() - start

    def stop_remove(sandbox: str) -> float:
        start = time.perf_counter()
        cri.stop(sandbox)
        cri.remove(sandbox)
        return time.perf_counter() - start

    workers = count if parallel else 1
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        runs = list(pool.map(run, range(count)))
        stops = list(pool.map(stop_remove, list(ids)))
    return {"Run": runs, "Stop+Remove": stops}


def daemon_seconds(daemon: NodeDaemon) -> dict[str, tuple[float, float]]:
    """(count, total seconds) of the daemon's own ADD and DEL answers."""
    m = daemon.metrics()
    name = "kuryr_supervisor_cni_request_duration_seconds"
    return {cmd: (m.get((f"{name}_count", (("command", cmd),)), 0.0),
                  m.get((f"{name}_sum", (("command", cmd),)), 0.0))
            for cmd in ("ADD", "DEL")}


def cni_cpu(node: CriNode, daemon: NodeDaemon | None) -> float:
    """CPU seconds so far on the CNI path: containerd's reaped children
    (every plugin process it exec'd: loopback, kuryr-cni or bridge and
    host-local) plus, for ours, our daemon's process tree (idle work
    included: it is our cost; never counted against the reference)."""
    assert node.containerd.proc is not None
    ctd = psutil.Process(node.containerd.proc.pid).cpu_times()
    total = ctd.children_user + ctd.children_system
    if daemon is None:
        return total
    master = psutil.Process(daemon.pid)
    for proc in (master, *master.children(recursive=True)):
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def run(ctx: Context) -> Outcome:
    count, rounds = ctx.scale(20, 4), ctx.scale(4, 1)
    with running_cri_node(ctx.ws.tmp / "cri-node") as node:
        ours, daemon = _ours(node, ctx)
        try:
            networks = [ours, _reference(node)]
            samples: dict[str, list[float]] = {
                f"{n.label}|{mode}|{phase}": [] for n in networks
                for mode in ("sequential", "parallel") for phase in PHASES}
            #: the daemon's own time per answer: [count, total seconds]
            inside = {f"{mode}|{cmd}": [0.0, 0.0] for mode in ("sequential", "parallel")
                      for cmd in ("ADD", "DEL")}
            #: containerd's own timing of the CNI part: [count, total seconds]
            cni = {f"{n.label}|{mode}|{op}": [0.0, 0.0] for n in networks
                   for mode in ("sequential", "parallel")
                   for op in ("set_up_pod", "tear_down_pod")}
            #: CPU seconds on the CNI path (see cni_cpu), per implementation
            cpu = {f"{n.label}|{mode}": 0.0 for n in networks
                   for mode in ("sequential", "parallel")}
            current: list[Network] = []

            def block(network: Network, mode: str, pods: int, tag: str) -> None:
                """``pods`` sandboxes on ``network``, every counter read around them."""
                if current != [network]:
                    network.use(node)
                    current[:] = [network]
                before = daemon_seconds(daemon)
                cni_before = node.containerd.network_seconds()
                mine = daemon if network is ours else None
                cpu_before = cni_cpu(node, mine)
                got = measure(node, pods, mode == "parallel", tag)
                cni_after = node.containerd.network_seconds()
                cpu[f"{network.label}|{mode}"] += cni_cpu(node, mine) - cpu_before
                for op in ("set_up_pod", "tear_down_pod"):
                    acc = cni[f"{network.label}|{mode}|{op}"]
                    acc[0] += cni_after[op][0] - cni_before[op][0]
                    acc[1] += cni_after[op][1] - cni_before[op][1]
                if network is ours:
                    after = daemon_seconds(daemon)
                    for cmd in ("ADD", "DEL"):
                        inside[f"{mode}|{cmd}"][0] += after[cmd][0] - before[cmd][0]
                        inside[f"{mode}|{cmd}"][1] += after[cmd][1] - before[cmd][1]
                for phase in PHASES:
                    samples[f"{network.label}|{mode}|{phase}"] += got[phase]

            for i in range(rounds):
                # sequential: one pod each in turn, so both see the same moment
                for k in range(count):
                    for network in networks[(i + k) % 2:] + networks[:(i + k) % 2]:
                        block(network, "sequential", 1, f"r{i}s{k}{secrets.token_hex(2)}")
                # parallel: the whole burst each, the order rotating per round
                for network in networks[i % 2:] + networks[:i % 2]:
                    block(network, "parallel", count, f"r{i}p{secrets.token_hex(2)}")
            leftovers = node.cri.list()
        finally:
            node.clear_networks()
            daemon.close()
        setup = node.setup_seconds
    figures = []
    for mode in ("sequential", "parallel"):
        for phase in PHASES:
            own = samples[f"{OURS}|{mode}|{phase}"]
            ref = samples[f"{REFERENCE}|{mode}|{phase}"]
            for pct in (50, 99):
                figures.append(Figure(
                    NAME, f"{OURS}: {count} {mode} {phase} p{pct}",
                    percentile(own, pct), "s", percentile(ref, pct), REFERENCE,
                    goal=1.0 if pct == 50 else None, goal_on="ratio"))
    for mode in ("sequential", "parallel"):
        for op, label in (("set_up_pod", "CNI set-up"), ("tear_down_pod", "CNI tear-down")):
            (n, total), (rn, rtotal) = (cni[f"{OURS}|{mode}|{op}"],
                                        cni[f"{REFERENCE}|{mode}|{op}"])
            if n and rn:
                figures.append(Figure(
                    NAME, f"{OURS}: {mode} {label} mean (containerd's timer)",
                    total / n, "s", rtotal / rn, REFERENCE))
    for mode in ("sequential", "parallel"):
        pods = rounds * count
        figures.append(Figure(
            NAME, f"{OURS}: {mode} CNI CPU per pod (Run+Stop+Remove)",
            cpu[f"{OURS}|{mode}"] / pods, "s", cpu[f"{REFERENCE}|{mode}"] / pods, REFERENCE))
    inside_ms = {k: round(1000 * total / n, 1) if n else None
                 for k, (n, total) in inside.items()}
    return Outcome(figures, raw={"samples_s": samples, "setup_s": setup, "cni_s": cni,
                                 "cni_cpu_s": cpu,
                                 "daemon_mean_ms": inside_ms},
                   notes=[f"containerd {node.containerd.snapshotter} snapshotter, "
                          f"{rounds} rounds x {count} pods per mode and implementation "
                          f"(sequential: taking turns pod by pod; parallel: bursts, order "
                          f"rotating); setup (pause image build, containerd "
                          f"start, import) {setup:.1f} s; sandboxes left: {len(leftovers)}.",
                          "inside our daemon, mean ms per answer (where the time goes): "
                          + ", ".join(f"{k} {v}" for k, v in inside_ms.items())])
