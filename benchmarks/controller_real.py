"""Benchmark controller-real — the real Keystone and Neutron beside the fakes.

Every controller figure measured against the fakes is a figure about the
fakes: they answer a port create in about a millisecond. This benchmark
starts a real Keystone and Neutron (tests/fixtures/realcloud: Neutron ML2 on
MariaDB, 4 request threads) and the fake cloud, in the same run, and prints
for each:

- port create latency, one port per request and bulks of 10 (sequential
  requests as the controller's user, ports bound to a host);
- the Neutron server's CPU-seconds per port created (psutil, the real one
  only: the fake runs in this process);
- a burst of 100 pods created at once in a Kubernetes API fake, a
  controller daemon against each cloud: pod created → PodPort written,
  p50/p99, and the Neutron ports per pod left once the burst is served
  (more than one: duplicates).
"""
from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import psutil

from benchmarks.context import Context, Outcome
from benchmarks.stats import Figure, summarize

NAME = "controller-real"
NODE = "bench-node"


def _creates(cloud: Any, count: int, bulk: int) -> list[float]:
    """Seconds per request for ``count`` requests of ``bulk`` ports (0: a
    single-port request); every port removed afterwards."""
    from tests.fixtures.realcloud import rest
    url, token, made, took = cloud.neutron_url + "/v2.0/ports", cloud.token(), [], []
    tag = f"bench-{uuid.uuid4().hex[:8]}"

    def body(i: int) -> dict[str, Any]:
        return {"network_id": cloud.network_id, "name": f"{tag}-{i}",
                "device_id": f"{tag}-{i}", "device_owner": "compute:kuryr",
                "binding:host_id": NODE, "tags": [tag]}
    try:
        for i in range(count):
            started = time.monotonic()
            if bulk:
                answer = rest.request("POST", url, {"ports": [
                    body(i * bulk + j) for j in range(bulk)]}, token=token)
                made += [p["id"] for p in answer.expect(201)["ports"]]
            else:
                answer = rest.request("POST", url, {"port": body(i)}, token=token)
                made.append(answer.expect(201)["port"]["id"])
            took.append(time.monotonic() - started)
    finally:
        for port in cloud.ports(tags=tag):
            cloud.admin("DELETE", f"/v2.0/ports/{port['id']}")
    return took


def _burst(ctx: Context, cloud: Any, count: int) -> tuple[list[float], float]:
    """Pod created → PodPort seconds for ``count`` pods created at once,
    and the controller's ports per pod once all are written."""
    from tests.fixtures.clouds import controller_options
    from tests.fixtures.fakeapi import FakeAPI
    api = FakeAPI().start()
    seen: dict[str, float] = {}
    stop = threading.Event()

    def watch() -> None:                 # first sight of each PodPort
        while not stop.is_set():
            now = time.monotonic()
            for _, name in list(api.podports):
                seen.setdefault(name, now)
            time.sleep(0.005)
    try:
        api.add_node(NODE)
        opts = controller_options(cloud, api.url)
        opts["kubernetes"].update({"node_name": NODE, "request_timeout": 2.0,
                                   "watch_timeout": 30})
        opts["controller"].pop("resync_interval")
        opts["controller"]["openstack_timeout"] = 5.0   # the default
        ctx.ws.daemon(opts)
        threading.Thread(target=watch, daemon=True).start()
        created: dict[str, float] = {}
        uids = []
        for i in range(count):
            name = f"burst{i}"
            created[name] = time.monotonic()
            uids.append(api.add_pod("bench", name, NODE)["metadata"]["uid"])
        deadline = time.monotonic() + 600
        while len(seen) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        ports = sum(cloud.count_ports(device_id=uid) for uid in uids)
        latencies = [seen[n] - created[n] for n in created if n in seen]
        for i in range(count):
            api.delete_pod("bench", f"burst{i}")
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and any(
                cloud.count_ports(device_id=uid) for uid in uids[:5]):
            time.sleep(1)
        return latencies, ports / count
    finally:
        stop.set()
        api.stop()


def _measure(ctx: Context, cloud: Any, label: str, figures: list[Figure],
             raw: dict[str, Any], ref: dict[str, float] | None) -> dict[str, float]:
    singles = summarize(_creates(cloud, ctx.scale(30, 3), 0))
    bulks = summarize(_creates(cloud, ctx.scale(10, 2), 10))
    out = {"single": singles["median"], "single_p99": singles["p99"],
           "bulk": bulks["median"], "bulk_p99": bulks["p99"]}
    for key, what in (("single", "port create p50"),
                      ("single_p99", "port create p99"),
                      ("bulk", "bulk(10) create p50"),
                      ("bulk_p99", "bulk(10) create p99")):
        figures.append(Figure(NAME, f"{label}: {what}", out[key] * 1000, "ms",
                              ref[key] * 1000 if ref else None,
                              "fake cloud" if ref else ""))
    raw[label] = {"single": singles, "bulk10": bulks}
    return out


def run(ctx: Context) -> Outcome:
    from tests.fixtures.fakecloud import FakeCloud
    from tests.fixtures.realcloud import RealCloud
    figures: list[Figure] = []
    raw: dict[str, Any] = {}
    notes: list[str] = []
    count = ctx.scale(100, 5)
    fake = FakeCloud().start()
    real = RealCloud()
    try:
        real.start()
        notes.append("real cloud start: " + ", ".join(
            f"{k} {v:.1f} s" for k, v in real.timings.items()))
        ref = _measure(ctx, fake, "fake", figures, raw, None)
        proc = psutil.Process(real.neutron_pid())
        cpu0 = sum(proc.cpu_times()[:2])
        _measure(ctx, real, "real", figures, raw, ref)
        ports = ctx.scale(30, 3) + 10 * ctx.scale(10, 2)
        cpu = (sum(proc.cpu_times()[:2]) - cpu0) / ports
        figures.append(Figure(NAME, "real: Neutron CPU per port created",
                              cpu, "s"))
        bursts = {}
        for label, cloud in (("fake", fake), ("real", real)):
            lat, per_pod = _burst(ctx, cloud, count)
            bursts[label] = summarize(lat) if lat else {}
            raw[f"burst_{label}"] = {"latencies_s": lat, "ports_per_pod": per_pod}
            notes.append(f"{label}: {len(lat)}/{count} pods got a PodPort; "
                         f"{per_pod:.2f} Neutron ports per pod after the burst")
        for key in ("median", "p99"):
            if bursts["real"] and bursts["fake"]:
                figures.append(Figure(
                    NAME, f"real: burst of {count}, pod → PodPort {key}",
                    bursts["real"][key] * 1000, "ms",
                    bursts["fake"][key] * 1000, "fake cloud"))
    finally:
        real.close()
        fake.close()
    return Outcome(figures, raw=raw, notes=notes)
