"""Benchmark 9 — the controller role at cluster scale (10,000 pods).

A real controller daemon (``role = controller``, production defaults)
against the Kubernetes API, Keystone and Neutron fakes over loopback HTTP
(the test fixtures, in this process). Pods are shaped like a real
cluster's (labels, annotations, owner, a container with env, resources and
mounts, status conditions: about 3 KiB of JSON each), spread over 50
namespaces and 100 nodes. In order:

1. **10,000 pods present at start**: exec -> ready; exec -> every pod has
   its Neutron port and its PodPort; exec -> every PodPort says its port's
   status (the fake's ports are ACTIVE at once; the phases below start
   once it does); the controller's PSS (every process
   of the daemon, psutil ``memory_full_info`` as the memory benchmark);
   the Neutron requests made, by method and path.
2. **a 500-pod burst** (created as fast as the fake takes them): pod
   created -> PodPort written, p50 and p99; Neutron calls per new pod.
3. **a relist after 410 Gone** (history compacted, watches dropped):
   requests made (Kubernetes and Neutron) and time from the drop to the
   controller watching again (the relist is applied before it watches).
4. **a restart** at 10,500 pods: Neutron writes (POST, PUT, DELETE) from
   exec until it is ready and watching again, and Kubernetes writes
   (POST, PUT, PATCH, DELETE: a PodPort's status included).

Goals: PSS <= 150 MiB (the reference beside it: kube-controller-manager's
informers hold about 10 KiB per pod); burst p99 <= 2 s; Neutron calls per
new pod <= 1.1; 0 Neutron writes and 0 Kubernetes writes on restart (and
on the relist). The fakes answer in well under
a millisecond, so the figures are kuryr-supervisor's own share; the CPU
time of the fakes (this process) is printed beside the controller's, to
show the fakes are not what is measured.
"""
from __future__ import annotations

import collections
import time
import uuid
from typing import Any

import psutil

from benchmarks.context import Context, Outcome
from benchmarks.harness import BenchDaemon, Workspace, probe_once, wait_until
from benchmarks.stats import Figure, summarize

NAME = "controller-scale"
MIB = 1 << 20
GOAL_PSS_MIB, KCM_KIB_PER_POD = 150.0, 10.0
GOAL_BURST_P99_S, GOAL_CALLS_PER_POD = 2.0, 1.1
#: Writes: a PATCH is one too (a PodPort's status).
WRITES = ("POST", "PUT", "PATCH", "DELETE")
PODPORTS = "/apis/kuryr-supervisor.openstack.org/v1/namespaces/"


def pod_object(i: int, tag: str = "") -> dict[str, Any]:
    """A pod as a Deployment's ReplicaSet makes it, scheduled and running."""
    name, ns = f"web-{tag}{i}-7d9f8", f"team-{i % 50}"
    env = [{"name": f"SETTING_{j}", "value": f"value-{j}-" + "x" * 16}
           for j in range(8)]
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {
            "name": name, "namespace": ns, "uid": str(uuid.uuid4()),
            "generateName": f"web-{tag}{i}-", "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "web", "tier": "frontend", "pod-template-hash": "7d9f8",
                       "app.kubernetes.io/name": "web", "app.kubernetes.io/part-of": ns},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z",
                            "prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                 "name": f"web-{i}", "uid": str(uuid.uuid4()),
                                 "controller": True, "blockOwnerDeletion": True}]},
        "spec": {
            "nodeName": f"node-{i % 100}", "serviceAccountName": "default",
            "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
            "terminationGracePeriodSeconds": 30, "schedulerName": "default-scheduler",
            "containers": [{
                "name": "app", "image": "registry.example.org/team/web:1.24.3",
                "imagePullPolicy": "IfNotPresent", "env": env,
                "ports": [{"containerPort": 8080, "protocol": "TCP", "name": "http"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                              "limits": {"cpu": "500m", "memory": "256Mi"}},
                "volumeMounts": [{"name": "kube-api-access", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/"
                                               "serviceaccount"}],
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080},
                                   "periodSeconds": 10}}],
            "volumes": [{"name": "kube-api-access", "projected": {"sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt",
                               "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300}]},
        "status": {
            "phase": "Running", "qosClass": "Burstable", "hostIP": "192.168.0.10",
            "startTime": "2026-01-01T00:00:01Z",
            "conditions": [{"type": t, "status": "True",
                            "lastTransitionTime": "2026-01-01T00:00:02Z"}
                           for t in ("Initialized", "Ready", "ContainersReady",
                                     "PodScheduled")],
            "containerStatuses": [{"name": "app", "ready": True, "restartCount": 0,
                                   "image": "registry.example.org/team/web:1.24.3",
                                   "containerID": "containerd://" + "ab" * 32,
                                   "state": {"running": {
                                       "startedAt": "2026-01-01T00:00:02Z"}}}]}}


def footprint(daemon: BenchDaemon) -> dict[str, Any]:
    """PSS (MiB) of every process of the daemon, total and per process."""
    by_process, total = {}, 0
    for proc in daemon.processes():
        pss = proc.memory_full_info().pss
        total += pss
        by_process[f"{proc.pid} {' '.join(proc.cmdline())[:40]}"] = pss / MIB
    return {"pss": total / MIB, "by_process": by_process}


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


class Meter:
    """CPU time of the daemon's processes and of this process (the fakes)."""

    def __init__(self, daemon: BenchDaemon, *, fresh: bool = False) -> None:
        """``fresh``: the daemon was just exec'd, count all its CPU time."""
        self.daemon, self.me = daemon, psutil.Process()
        self._procs = [] if fresh else daemon.processes()
        self.started = (cpu_seconds(self._procs), cpu_seconds([self.me]))

    def read(self) -> dict[str, float]:
        self._procs = [p for p in self._procs if p.is_running()] + [
            p for p in self.daemon.processes() if p not in self._procs]
        return {"controller_cpu_s": cpu_seconds(self._procs) - self.started[0],
                "fakes_cpu_s": cpu_seconds([self.me]) - self.started[1]}


def _watch_opened_after(api: Any, since: float) -> float | None:
    """When the controller's first pod watch after a pod list (both after
    ``since``) was opened: the relist is applied by then."""
    listed = None
    for at, method, path, query in list(api.requests):
        if at < since or method != "GET" or path != "/api/v1/pods":
            continue
        if query.get("watch") != "true":
            listed = at
        elif listed is not None and query.get("timeoutSeconds") != "1":
            return float(at)
    return None


def _k8s_counts(api: Any, since: float) -> collections.Counter[str]:
    out: collections.Counter[str] = collections.Counter()
    for at, method, path, query in list(api.requests):
        if at >= since:
            kind = ("podports" if path.startswith(PODPORTS) else
                    "pods watch" if query.get("watch") == "true" else path)
            out[f"{method} {kind}"] += 1
    return out


def _all_ported(cloud: Any, pods: list[dict[str, Any]]) -> bool:
    if len(cloud.api.podports) < len(pods):
        return False
    return all(len(cloud.neutron.ports_for(p["metadata"]["uid"])) == 1 for p in pods)


def _all_said(cloud: Any) -> bool:
    """Every PodPort says its port's status."""
    return all((obj.get("status") or {}).get("portStatus")
               for obj in list(cloud.api.podports.values()))


def _start(daemon: BenchDaemon, timeout: float) -> tuple[float, float]:
    """Exec the daemon; (monotonic at exec, seconds to ready)."""
    daemon.start()
    t0 = time.monotonic()
    try:
        wait_until(lambda: probe_once(daemon.port, "/ready")[0] == 200, timeout, 0.05)
    except TimeoutError:
        raise RuntimeError(f"controller not ready:\n{daemon.log()}") from None
    return t0, time.monotonic() - t0


def scenario(ws: Workspace, count: int, burst: int, *,
             timeout: float = 900.0) -> dict[str, Any]:
    """Run the four phases (see the module); raw results."""
    from tests.fixtures.controller import start_cloud
    cloud = start_cloud(cidr="10.30.0.0/16", gateway="10.30.0.1")
    try:
        return _phases(ws, cloud, count, burst, timeout)
    finally:
        cloud.stop()


def _phases(ws: Workspace, cloud: Any, count: int, burst: int,
            timeout: float) -> dict[str, Any]:
    api, neutron = cloud.api, cloud.neutron
    pods = [pod_object(i) for i in range(count)]
    api.load_pods(pods)
    out: dict[str, Any] = {"pods": count, "burst": burst,
                           "pod_json_bytes": len(__import__("json").dumps(pods[0]))}
    daemon = ws.daemon({
        "DEFAULT": {"role": "controller"},
        "kubernetes": {"api_root": api.url, "node_name": "bench-node"},
        "controller": {"pod_network_id": neutron.network_id,
                       "pod_subnet_id": neutron.subnet["id"]},
        "neutron": cloud.keystone.conf_overrides()}, start=False)
    # 1. start at `count` pods
    wall, meter = time.time(), Meter(daemon, fresh=True)
    t0, out["ready_s"] = _start(daemon, timeout)
    wait_until(lambda: _all_ported(cloud, pods), timeout, 0.1)
    out["all_ported_s"] = time.monotonic() - t0
    # Every PodPort says its port's status (the fake's ports are ACTIVE
    # at once): what a restart or a relist then finds already said.
    wait_until(lambda: _all_said(cloud), timeout, 0.2)
    out["all_said_s"] = time.monotonic() - t0
    out["start_neutron"] = dict(neutron.counts(wall))
    out["start_k8s"] = dict(_k8s_counts(api, t0))
    out["start_cpu"] = meter.read()
    time.sleep(2)                            # settle: a sweep, a heartbeat or two
    out["start_memory"] = footprint(daemon)
    # 2. burst
    meter, wall, bulks = Meter(daemon), time.time(), len(neutron.bulk_sizes)
    created: dict[tuple[str, str], float] = {}
    extra = [pod_object(i, "b") for i in range(burst)]
    for pod in extra:
        meta = pod["metadata"]
        created[(meta["namespace"], meta["name"])] = time.monotonic()
        api.load_pods([pod])
    wait_until(lambda: all(k in api.podport_times for k in created), timeout, 0.02)
    out["burst_s"] = [api.podport_times[k] - t for k, t in created.items()]
    out["burst_neutron"] = dict(neutron.counts(wall))
    out["burst_bulk_sizes"] = list(neutron.bulk_sizes[bulks:])
    out["burst_cpu"] = meter.read()
    pods += extra
    wait_until(lambda: _all_said(cloud), timeout, 0.2)
    # 3. relist after 410
    time.sleep(1)
    meter, wall = Meter(daemon), time.time()
    t0 = time.monotonic()
    api.compact()
    api.drop_watches()
    watching = wait_until(lambda: _watch_opened_after(api, t0), timeout, 0.02)
    out["relist_s"] = watching - t0
    out["relist_neutron"] = dict(neutron.counts(wall))
    out["relist_k8s"] = dict(_k8s_counts(api, t0))
    out["relist_cpu"] = meter.read()
    out["relist_memory"] = footprint(daemon)
    # 4. restart
    daemon.close()
    wall, meter = time.time(), Meter(daemon, fresh=True)
    t0, out["restart_ready_s"] = _start(daemon, timeout)
    wait_until(lambda: _watch_opened_after(api, t0), timeout, 0.05)
    out["restart_watching_s"] = time.monotonic() - t0
    time.sleep(2)
    out["restart_neutron"] = dict(neutron.counts(wall))
    out["restart_k8s"] = dict(_k8s_counts(api, t0))
    out["restart_cpu"] = meter.read()
    out["ports_total"] = len(neutron.ports)
    out["all_ported_after"] = _all_ported(cloud, pods)
    return out


def writes(counts: dict[str, int]) -> int:
    return sum(n for key, n in counts.items() if key.split()[0] in WRITES)


def run(ctx: Context) -> Outcome:
    count, burst = ctx.scale(10_000, 300), ctx.scale(500, 30)
    r = scenario(ctx.ws, count, burst)
    b = summarize(r["burst_s"])
    kcm = KCM_KIB_PER_POD * count / 1024
    start_calls = sum(r["start_neutron"].values())
    burst_calls = sum(r["burst_neutron"].values())
    f = [
        Figure(NAME, f"exec -> ready ({count} pods)", r["ready_s"], "s"),
        Figure(NAME, f"exec -> every pod has port + PodPort ({count})",
               r["all_ported_s"], "s"),
        Figure(NAME, f"exec -> every PodPort says its port's status ({count})",
               r["all_said_s"], "s"),
        Figure(NAME, f"PSS at {count} pods, all processes", r["start_memory"]["pss"],
               "MiB", kcm, "kcm informers 10 KiB/pod", goal=GOAL_PSS_MIB),
        Figure(NAME, f"Neutron calls per pod at start ({start_calls} calls)",
               start_calls / count, "calls", goal=GOAL_CALLS_PER_POD),
        Figure(NAME, "  controller CPU / fakes CPU at start",
               r["start_cpu"]["controller_cpu_s"], "s", r["start_cpu"]["fakes_cpu_s"],
               "fakes (this process)"),
        Figure(NAME, f"burst of {burst}: created -> PodPort p50", b["median"], "s"),
        Figure(NAME, f"burst of {burst}: created -> PodPort p99", b["p99"], "s",
               GOAL_BURST_P99_S, "budget", goal=GOAL_BURST_P99_S),
        Figure(NAME, f"Neutron calls per new pod in burst ({burst_calls} calls)",
               burst_calls / burst, "calls", goal=GOAL_CALLS_PER_POD),
        Figure(NAME, "relist after 410: time to watching again", r["relist_s"], "s"),
        Figure(NAME, "relist after 410: Kubernetes requests",
               sum(r["relist_k8s"].values()), "req"),
        Figure(NAME, "relist after 410: Neutron requests",
               sum(r["relist_neutron"].values()), "req"),
        Figure(NAME, "relist after 410: Kubernetes writes (PodPort status "
               "included)", writes(r["relist_k8s"]), "req", goal=0),
        Figure(NAME, f"PSS after relist ({count + burst} pods)", r["relist_memory"]["pss"],
               "MiB", KCM_KIB_PER_POD * (count + burst) / 1024, "kcm informers 10 KiB/pod",
               goal=GOAL_PSS_MIB),
        Figure(NAME, "restart: exec -> ready", r["restart_ready_s"], "s"),
        Figure(NAME, "restart: Neutron writes (POST/PUT/DELETE)",
               writes(r["restart_neutron"]), "req", goal=0),
        Figure(NAME, "restart: Kubernetes writes (PodPort status included)",
               writes(r["restart_k8s"]), "req", goal=0),
    ]
    notes = [f"controller-scale: {count} pods of {r['pod_json_bytes']} B JSON each at "
             f"start, then {burst}; Neutron at start {r['start_neutron']}; in the burst "
             f"{r['burst_neutron']}; relist: Neutron {r['relist_neutron']}, Kubernetes "
             f"{r['relist_k8s']}; restart: Neutron {r['restart_neutron']}, Kubernetes "
             f"{r['restart_k8s']}; CPU s (controller/fakes): burst "
             f"{r['burst_cpu']}, relist {r['relist_cpu']}, restart {r['restart_cpu']}; "
             f"{r['ports_total']} ports in Neutron, every pod one port: "
             f"{r['all_ported_after']}"]
    return Outcome(f, raw=r, notes=notes)
