"""The policy model against the reference evaluator, by packets on paper:
for seeded random worlds (three namespaces, pods with labels and named
ports that differ between pods, policies of the upstream e2e classes), the
model's security groups, rules, address groups and ports' groups are put
in a simulated Neutron (tests/fixtures/netpol/neutron.py: a port admits a
connection iff some rule of one of its groups matches; stateful) and every
probe (pod to pod, to and from outside, to and from the nodes; TCP, UDP,
SCTP; eight ports) must get the reference's answer.

The pods no policy selects are in the project's ``default`` group as
Neutron makes it (ingress from its own members only) with what a
deployment adds to it, never the pod subnet: the nodes' group (the
network-health handler's rule, the kubelet's probes) and the outside
addresses it exposes its pods to. A pod a policy selects leaves
``default``, so it reaches the pods no policy selects only through the
model's own rule in ``default`` (its ``selected`` marker): without it, the
worlds disagree (:func:`test_without_the_default_rule_they_disagree`)."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import pytest

from kuryr_supervisor.controller.policy import spec
from kuryr_supervisor.controller.policy.desired import (
    Desired,
    Infrastructure,
    desired,
)
from kuryr_supervisor.controller.policy.naming import Naming
from kuryr_supervisor.controller.policy.rules import SgRule
from tests.fixtures.netpol import worlds
from tests.fixtures.netpol.neutron import Cloud, neutron_default
from tests.fixtures.netpol.reference import allowed

NAMING = Naming("kuryr-supervisor:test-cluster")
#: The outside a deployment exposes its pods to (the worlds' outside
#: addresses), by family.
EXPOSED = {"IPv4": ("203.0.113.0/24", "198.51.100.0/24"),
           "IPv6": ("2001:db8::/32",)}
CASES = [(i, c) for i, c in enumerate(worlds.CLASSES)] + \
    [(100 + i, "") for i in range(10)]


def deployment(families: tuple[str, ...]) -> list[SgRule]:
    """What a deployment adds to ``default`` (see the module): the nodes'
    group, the outside it exposes; never the pod subnet."""
    return [SgRule("ingress", f, remote_group="nodes") for f in families] + \
        [SgRule("ingress", f, remote_ip_prefix=p) for f in families
         for p in EXPOSED[f]]


def model(w: worlds.World, families: tuple[str, ...] = ("IPv4",)) -> Desired:
    return desired([spec.policy(p) for p in w.policies],
                   [spec.pod(p) for p in w.pods],
                   [spec.namespace(n) for n in w.namespaces], NAMING,
                   infrastructure=Infrastructure(
                       {n: (ip,) for n, ip in worlds.NODES.items()}),
                   families=families)


def cloud(w: worlds.World, families: tuple[str, ...] = ("IPv4",),
          want: Desired | None = None) -> Cloud:
    pods = [spec.pod(p) for p in w.pods]
    return Cloud(want or model(w, families), {p.key: p.ips for p in pods},
                 neutron_default(families, deployment(families)),
                 members={"nodes": worlds.NODES.values()})


def _source(src: dict | str, dst: str) -> str:
    if isinstance(src, str):
        return src
    ips = [i["ip"] for i in src["status"]["podIPs"]]
    return next(ip for ip in ips if (":" in ip) == (":" in dst))


def disagreements(w: worlds.World, families: tuple[str, ...] = ("IPv4",),
                  probes: Iterable[worlds.Probe] | None = None,
                  want: Desired | None = None
                  ) -> tuple[int, int, list[str]]:
    made, wrong, admitted = cloud(w, families, want), [], 0
    count = 0
    for src, dst, port, proto in (probes or worlds.probes(w)):
        count += 1
        want = allowed(w.policies, w.pods, w.namespaces, src, dst, port,
                       proto, nodes=worlds.NODES)
        src_ip = _source(src, dst)
        got = made.allowed(src_ip, dst, port, proto)
        admitted += want
        if got != want:
            wrong.append(f"{src_ip} -> {dst} {port}/{proto}: reference "
                         f"{want}, model {got}")
    return count, admitted, wrong


@pytest.mark.parametrize(("seed", "first"), CASES,
                         ids=[f"{s}-{c or 'random'}" for s, c in CASES])
def test_the_model_admits_what_the_reference_allows(seed: int,
                                                    first: str) -> None:
    w = worlds.world(seed, first)
    count, admitted, wrong = disagreements(w)
    assert count >= 300
    assert 0 < admitted < count, "a case that admits all or nothing proves little"
    assert not wrong, "\n".join([f"classes {w.classes}", *wrong[:20],
                                 f"... {len(wrong)} of {count}"])


def test_enough_cases() -> None:
    assert len(CASES) >= 15 and set(worlds.CLASSES) <= {c for _, c in CASES}


def _crossing(w: worlds.World) -> int:
    """The probes the reference allows from a pod a policy selects to a
    pod none selects."""
    selected = model(w).ports
    unselected = {p["status"]["podIP"] for p in w.pods
                  if spec.pod(p).key not in selected}
    return sum(1 for src, dst, port, proto in worlds.probes(w)
               if not isinstance(src, str) and dst in unselected
               and spec.pod(src).key in selected
               and allowed(w.policies, w.pods, w.namespaces, src, dst, port,
                           proto, nodes=worlds.NODES))


def test_without_the_default_rule_they_disagree() -> None:
    """Most worlds have a pod a policy selects reach a pod none selects;
    without the model's rule in ``default`` (Neutron's admits its members
    only) every one of those probes disagrees, and only those."""
    crossing = {seed: _crossing(worlds.world(seed, first))
                for seed, first in CASES}
    assert sum(1 for n in crossing.values() if n) >= len(CASES) // 2, \
        crossing
    for seed, first in CASES:
        w = worlds.world(seed, first)
        bare = dataclasses.replace(model(w), default_rules=frozenset())
        _, _, wrong = disagreements(w, want=bare)
        assert len(wrong) == crossing[seed], (seed, wrong[:5])


@pytest.mark.parametrize("seed", [200, 201, 202])
def test_dual_stack(seed: int) -> None:
    """Pods with an IPv4 and an IPv6 address, the model given both
    families: every probe to either address agrees too (a block is of one
    family: an IPv6 peer outside every IPv4 block)."""
    w = worlds.world(seed)
    for pod in w.pods:
        v4 = pod["status"]["podIP"]
        pod["status"]["podIPs"].append({"ip": "fd00::" + v4.replace(".", ":")})
    six = [(src, dst, port, proto) for src, dst, port, proto
           in worlds.probes(w) if not isinstance(src, str) and
           ":" not in dst and dst.startswith("10.")]
    six = [(src, "fd00::" + dst.replace(".", ":"), port, proto)
           for src, dst, port, proto in six] + \
        [("2001:db8::1", "fd00::" + p["status"]["podIP"].replace(".", ":"),
          80, "TCP") for p in w.pods]
    count, admitted, wrong = disagreements(w, ("IPv4", "IPv6"), six)
    assert count >= 300 and 0 < admitted < count
    assert not wrong, "\n".join([f"classes {w.classes}", *wrong[:20]])
    count, admitted, wrong = disagreements(w, ("IPv4", "IPv6"))
    assert not wrong, "\n".join([f"classes {w.classes}", *wrong[:20]])
