"""Tenant attacks: nothing a pod's owner writes steers a pod's address.

A real CNI daemon (``address_source = podport``) against the Kubernetes
API fake, the shim run as a runtime runs it, real network namespaces. A
victim pod is bound first (its PodPort written as the controller would);
then, for each forgery of :mod:`tests.fixtures.tenant` (the gateway's
address, another prefix, outside the subnet, /0, /1, 169.254.169.254, an
all-zero or multicast MAC, a foreign gateway, another pod's data with
``podUid`` edited), an attacker pod:

1. writes it as its own annotation, as any pod owner may: never read, the
   ADD answers 11 (no PodPort) -- the long version does this for every
   case, the short one for two;
2. then gets it as a PodPort (a forged or mistaken writer): refused with
   the case's code (7, 102), before anything is bound.

Invariants: every answer is the expected CNI error; the bridge's addresses
and the routes through it (``ip -j``) are what they were after the victim's
ADD; no veth is left for an attacker and its namespace holds no interface;
``cniFailures`` stays 0, no worker restarts, ``/alive`` and ``/ready`` stay
200, and the victim's attachment still passes CHECK. Rounds repeat the
whole set (long: 3).
"""
from __future__ import annotations

import ipaddress
import random
import time

from drills.common import Report, Workspace, host_ends, pod_links, wait_ready
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.tenant import annotate, forged, node_view, podport, spec_for
from tests.functional.cni_harness import run_shim

NODE = "node-drill"


def _args(pod: dict) -> str:  # type: ignore[type-arg]
    meta = pod["metadata"]
    return (f"K8S_POD_NAMESPACE={meta['namespace']};K8S_POD_NAME={meta['name']};"
            f"K8S_POD_UID={meta['uid']}")


def run(short: bool = False, seed: int = 0) -> Report:
    rng = random.Random(seed)
    rounds = 1 if short else 3
    report = Report("tenant")
    subnet = ipaddress.IPv4Network(
        f"10.{rng.randrange(150, 199)}.{rng.randrange(256)}.0/24")
    api = FakeAPI().start()
    api.add_node(NODE)
    try:
        with Workspace("tenant") as ws:
            _attack(ws, api, subnet, rounds, short, report)
    finally:
        api.stop()
    return report


def _attack(ws: Workspace, api: FakeAPI, subnet: ipaddress.IPv4Network,
            rounds: int, short: bool, report: Report) -> None:
    daemon = ws.start(ws.daemon({
        "kubernetes": {"api_root": api.url, "node_name": NODE,
                       "request_timeout": 1.0, "watch_timeout": 5},
        "cni_daemon": {"address_source": "podport",
                       "annotation_timeout": 0.5},
        "ipam": {"subnet": str(subnet),
                 "gateway": str(subnet.network_address + 1)}}))
    if not report.check(wait_ready(daemon), "daemon never became ready"):
        return
    bridge = str(daemon.options["binding"]["bridge"])
    conf = ws.netconf(daemon)
    victim = api.add_pod("default", "victim", NODE)
    victim_spec = spec_for(victim, subnet, 20)
    api.put_podport(podport(victim, victim_spec))
    victim_ns = ws.netns()
    code, result = run_shim(ws.shim_path, "ADD", conf, container_id="ksvxvictim",
                            netns=victim_ns, args=_args(victim))
    if not report.check(code == 0, f"victim ADD failed: {result}"):
        return
    before = node_view(bridge)
    attackers: list[str] = []
    refused: list[float] = []
    cases = 0
    for r in range(rounds):
        template = forged(victim, victim_spec,
                          api.add_pod("default", f"t{r}", NODE), subnet)
        for i, (case, _, _) in enumerate(template):
            evil = api.add_pod("default", f"evil{r}-{i}", NODE)
            [(_, obj, want)] = [c for c in forged(victim, victim_spec, evil,
                                                  subnet) if c[0] == case]
            netns = ws.netns()
            cases += 1
            if not short or i < 2:
                annotate(api, evil, obj["spec"])
                cid = f"ksvxa{r}x{i}"
                attackers.append(cid)
                code, err = run_shim(ws.shim_path, "ADD", conf, container_id=cid,
                                     netns=netns, args=_args(evil))
                report.check(code != 0 and isinstance(err, dict)
                             and err.get("code") == 11,
                             f"{case} as annotation: {err}")
            api.put_podport(obj)
            cid = f"ksvxp{r}x{i}"
            attackers.append(cid)
            start = time.monotonic()
            code, err = run_shim(ws.shim_path, "ADD", conf, container_id=cid,
                                 netns=netns, args=_args(evil))
            refused.append(time.monotonic() - start)
            report.check(code != 0 and isinstance(err, dict)
                         and err.get("code") == want,
                         f"{case} as PodPort: want code {want}, got {err}")
            report.check(node_view(bridge) == before,
                         f"{case}: the node's bridge or routes changed")
            report.check(pod_links(netns) == [],
                         f"{case}: interfaces left in the attacker's netns")
    status = daemon.status()
    report.check(status["cniFailures"] == 0,
                 f"refusals counted: cniFailures {status['cniFailures']}")
    restarts = sum(c["restarts"] for c in status["components"].values())
    report.check(restarts == 0, f"{restarts} worker restarts")
    report.check(daemon.probe("/alive") == 200 and daemon.probe("/ready") == 200,
                 "daemon not alive and ready after the attacks")
    report.check(host_ends(attackers) == [],
                 f"attacker veths left: {host_ends(attackers)}")
    code, err = run_shim(ws.shim_path, "CHECK", {**conf, "prevResult": result},
                         container_id="ksvxvictim", netns=victim_ns,
                         args=_args(victim))
    report.check(code == 0, f"victim's CHECK after the attacks: {err}")
    run_shim(ws.shim_path, "DEL", conf, container_id="ksvxvictim",
             netns=victim_ns, args=_args(victim))
    report.figures["forged cases"] = cases
    refused.sort()
    if refused:
        report.figures["refusal median ms"] = round(
            refused[len(refused) // 2] * 1000, 1)
