"""Benchmark 7 — controller role: pod created to address bound.

The controller role and a CNI daemon with ``address_source = podport``
run against the Kubernetes API, Keystone and Neutron fakes over loopback
HTTP (the test fixtures, in this process). For each of 100 pods, one at a
time: the pod is created in the API and kuryr-cni's ADD is called at once
(the worst case for the PodPort wait: the runtime is never this fast);
the figure is the time from the pod's creation to ADD returning with the
Neutron port's address bound in the pod's netns; the share of it before the
controller wrote the PodPort is printed below it. Beside it, in the same run
and interleaved pod by pod, the embedded IPAM's ADD through the same shim
(the shared standalone daemon).

The fakes answer in well under a millisecond; a real Neutron port create
takes tens to hundreds, so this measures kuryr-supervisor's own share: the
watch event, the handler's three API calls and the CNI side's wait.
"""
from __future__ import annotations

import dataclasses
import random
import time

from benchmarks import plugins
from benchmarks.context import Context, Outcome
from benchmarks.plugins import Plugin, pods
from benchmarks.stats import Figure, summarize

NAME = "controller"
NODE = "bench-node"


def _with_pod(plugin: Plugin, pod: dict) -> Plugin:  # type: ignore[type-arg]
    meta = pod["metadata"]
    args = (f"K8S_POD_NAMESPACE={meta['namespace']};K8S_POD_NAME={meta['name']};"
            f"K8S_POD_UID={meta['uid']}")
    return dataclasses.replace(plugin, args=args)


def run(ctx: Context) -> Outcome:
    from tests.fixtures.controller import start_cloud
    count = ctx.scale(100, 5)
    net = f"10.{random.randrange(150, 199)}.{random.randrange(256)}"
    cloud = start_cloud(cidr=f"{net}.0/24", gateway=f"{net}.1")
    try:
        return _measure(ctx, cloud, count)
    finally:
        cloud.stop()


def _measure(ctx: Context, cloud, count: int) -> Outcome:  # type: ignore[no-untyped-def]
    cloud.api.add_node(NODE)
    kube = {"api_root": cloud.api.url, "node_name": NODE,
            "request_timeout": 2.0, "watch_timeout": 30}
    ctx.ws.daemon({
        "DEFAULT": {"role": "controller"}, "kubernetes": kube,
        "controller": {"pod_network_id": cloud.neutron.network_id,
                       "pod_subnet_id": cloud.neutron.subnet["id"]},
        "neutron": cloud.keystone.conf_overrides()})
    # The node's own view of the pod network: what every PodPort must fit.
    cni = ctx.ws.daemon({"kubernetes": kube,
                         "cni_daemon": {"address_source": "podport"},
                         "ipam": {"subnet": cloud.neutron.subnet["cidr"],
                                  "gateway": cloud.neutron.subnet["gateway_ip"]}})
    embedded = ctx.shims()[0]           # the compiled shim, through cnitool
    cni_plugin = plugins.kuryr(ctx.ws, cni, "go", tag="-annotation")
    for_pods = pods(ctx.ws.netns(count), "ctl")
    for_ipam = pods(ctx.ws.netns(count), "ipam")
    bound: list[float] = []
    annotated: list[float] = []
    ipam: list[float] = []
    done = []
    for i in range(count):
        (cid, netns), (icid, inetns) = for_pods[i], for_ipam[i]
        if i % 2:
            ipam.append(embedded.call("ADD", icid, inetns))
        started = time.monotonic()
        pod = cloud.api.add_pod("bench", f"pod{i}", NODE)
        plugin = _with_pod(cni_plugin, pod)
        plugin.call("ADD", cid, netns)
        bound.append(time.monotonic() - started)
        path = "/apis/kuryr-supervisor.openstack.org/v1/namespaces/bench/podports"
        annotated.append(min(t for t, method, p, _ in list(cloud.api.requests)
                             if method == "POST" and p == path and t >= started)
                         - started)
        if not i % 2:
            ipam.append(embedded.call("ADD", icid, inetns))
        done.append((plugin, cid, netns, pod))
    for plugin, cid, netns, pod in done:
        plugin.call("DEL", cid, netns)
        cloud.api.delete_pod("bench", pod["metadata"]["name"])
    for cid, netns in for_ipam:
        embedded.call("DEL", cid, netns)
    b, r, a = summarize(bound), summarize(ipam), summarize(annotated)
    figures = [Figure(NAME, f"pod created -> address bound {key} (n={count})",
                      b[key] * 1000, "ms", r[key] * 1000, "embedded IPAM ADD")
               for key in ("median", "p99")]
    figures += [Figure(NAME, f"of which pod created -> PodPort written {key}",
                       a[key] * 1000, "ms") for key in ("median", "p99")]
    return Outcome(figures, raw={"bound_s": bound, "embedded_add_s": ipam,
                                 "podport_write_s": annotated},
                   notes=[f"{count} pods one at a time; ADD called as soon as the "
                          "pod exists; Keystone/Neutron/Kubernetes are loopback fakes "
                          f"({len(cloud.keystone.tokens)} token(s) issued)"])
