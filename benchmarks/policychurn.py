"""The policy benchmark's fault figures: the whole controller killed
(``kill -9`` of every process of the daemon) at random moments while
NetworkPolicies are created, replaced and deleted and pods relabelled,
then what Neutron holds once the last one settles; and a restart of a
settled controller, whose writes are counted.

What is judged against the model the handler applies
(:func:`kuryr_supervisor.controller.policy.desired.desired`, fed with the
API's objects as they are at the end): the policies' security groups and
the peers' address groups Neutron holds that the model does not ask for
(left), those it holds twice under one name (duplicated), those it asks
for that are missing, and the pods' ports whose groups are not the
model's. A kill lands after a random 0-1.5 s, so some land mid-pass,
some between passes, some while the daemon is still starting.
"""
from __future__ import annotations

import collections
import os
import random
import signal
import time
from typing import Any

from benchmarks.context import Context
from benchmarks.policycluster import NS, Cluster
from benchmarks.stats import Figure

#: Label sets the churn's policies and pods draw from.
SELECTORS = ({"app": "web"}, {"app": "spare"}, {"role": "client"},
             {"tier": "a"}, {"tier": "b"})
POD_LABELS = ({"app": "web", "role": "client"}, {"app": "spare", "tier": "a"},
              {"app": "web", "tier": "b"}, {"app": "spare"})


def _spec(rng: random.Random) -> dict[str, Any]:
    """A random policy over the churn's label sets: ingress or egress, a
    pod selector peer, sometimes with a namespace selector."""
    peer: dict[str, Any] = {"podSelector": {"matchLabels": dict(
        rng.choice(SELECTORS))}}
    if rng.random() < 0.3:
        peer["namespaceSelector"] = {"matchLabels": {"team": "x"}}
    ports = [{"port": rng.choice((80, 443, 8080))}]
    selector = {"matchLabels": dict(rng.choice(SELECTORS[:2]))}
    if rng.random() < 0.3:
        return {"podSelector": selector, "policyTypes": ["Egress"],
                "egress": [{"to": [peer], "ports": ports}]}
    return {"podSelector": selector,
            "ingress": [{"from": [peer], "ports": ports}]}


def _operate(c: Cluster, rng: random.Random, names: list[str],
             serial: list[int]) -> str:
    """One random change: a policy created, replaced or deleted, or a
    pod relabelled."""
    api = c.api
    roll = rng.random()
    if roll < 0.35 or not names:
        serial[0] += 1
        name = f"churn-{serial[0]}"
        api.put_networkpolicy(NS, name, _spec(rng))
        names.append(name)
        return "create"
    if roll < 0.6:
        api.put_networkpolicy(NS, rng.choice(names), _spec(rng))
        return "update"
    if roll < 0.85:
        name = names.pop(rng.randrange(len(names)))
        api.delete_networkpolicy(NS, name)
        return "delete"
    pods = [k for k in api.pods if k[0] == NS and
            k[1].startswith("pod-")]
    if not pods:
        return "none"
    api.modify_pod(*rng.choice(pods), labels=dict(rng.choice(POD_LABELS)))
    return "relabel"


def _kill9(c: Cluster) -> None:
    """Every process of the daemon killed at once, then started again (a
    daemon killed before it made its own session has no other process;
    one that forks while it is killed is killed again)."""
    from tests.fixtures.daemon import session_pids
    d = c.daemon
    deadline = time.monotonic() + 10
    while True:
        for pid in {d.pid} | session_pids(d.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if d.proc.poll() is not None and not session_pids(d.pid):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the daemon (pid {d.pid}) outlived kill -9")
        time.sleep(0.05)
    d.start()


def _judge(c: Cluster) -> dict[str, int]:
    """What Neutron holds against what the model asks (see the module)."""
    from kuryr_supervisor.controller.policy import spec
    from kuryr_supervisor.controller.policy.desired import desired, port_groups
    from kuryr_supervisor.controller.policy.naming import Naming
    api, stack = c.api, c.stack
    naming = Naming(c.tag)
    with api.cond:
        policies = [spec.policy(o) for o in api.networkpolicies.values()]
        pods = [spec.pod(o) for o in api.pods.values()]
        uids = {k: o["metadata"]["uid"] for k, o in api.pods.items()}
        namespaces = [spec.namespace(o)
                      for o in api.namespace_objects.values()]
    want = desired(policies, pods, namespaces, naming)
    groups = stack.admin("GET", "/v2.0/security-groups",
                         tags=c.tag).expect(200)["security_groups"]
    ags = stack.admin("GET", "/v2.0/address-groups",
                      description=c.tag).expect(200)["address_groups"]
    held = collections.Counter(
        [g["name"] for g in groups if ":np:" in g["name"]] +
        [g["name"] for g in ags if ":ag:" in g["name"]])
    wanted = {n for n in want.groups if ":np:" in n} | \
        {n for n in want.address_groups if ":ag:" in n}
    ids = {g["name"]: g["id"] for g in groups}
    ours = set(ids.values())
    wrong = 0
    for pod in pods:
        uid = uids.get(pod.key)
        if not uid or pod.host_network:
            continue
        names = port_groups(pod, policies, naming)
        for port in stack.admin("GET", "/v2.0/ports",
                                device_id=uid).expect(200)["ports"]:
            have = set(port["security_groups"])
            if names is None:
                wrong += bool(have & ours)
            elif have != {ids.get(n, "?") for n in names}:
                wrong += 1
    return {"left": sum(1 for n in held if n not in wanted),
            "duplicated": sum(n - 1 for n in held.values() if n > 1),
            "missing": sum(1 for n in wanted if n not in held),
            "ports wrong": wrong, "policies": len(policies),
            "address groups": sum(1 for n in held if ":ag:" in n)}


def churn(c: Cluster, ctx: Context, figures: list[Figure],
          raw: dict[str, Any], notes: list[str]) -> None:
    """The kill -9 figures, then the restart's writes (see the module)."""
    from tests.fixtures.netpol.ovnpods import settle
    kills = ctx.scale(50, 5)
    rng = random.Random(41)
    names: list[str] = []
    serial = [0]
    ops: collections.Counter[str] = collections.Counter()
    started = time.monotonic()
    for _ in range(kills):
        for _ in range(rng.randint(1, 3)):
            ops[_operate(c, rng, names, serial)] += 1
        time.sleep(rng.uniform(0.0, 1.5))
        _kill9(c)
        if rng.random() < 0.5:      # some kills while it is starting
            c.daemon.wait_ready(120)
    c.daemon.wait_ready(120)
    took = settle(c.daemon, c.stack, c.api, "after the kills", quiet=3.0)
    judged = _judge(c)
    raw["kills"] = {"kills": kills, "operations": dict(ops),
                    "seconds": time.monotonic() - started,
                    "settled_in": took, **judged}
    for what in ("left", "duplicated", "missing", "ports wrong"):
        figures.append(Figure(
            "policy", f"after {kills} kill -9 through {sum(ops.values())} "
            f"changes: groups and address groups {what}"
            if what != "ports wrong" else
            f"after {kills} kill -9: pods' ports not in their groups",
            float(judged[what]), "objects", goal=0.0))
    figures.append(Figure("policy", "  settled after the last kill",
                          took, "s"))
    c.daemon.close()
    c.daemon.start()
    c.daemon.wait_ready(120)
    settle(c.daemon, c.stack, c.api, "after a restart", quiet=3.0)
    writes = c.writes()
    raw["restart"] = writes
    figures.append(Figure("policy", "Neutron writes of a restart "
                                    f"({judged['policies']} policies, "
                                    f"{len(c.api.pods)} pods)",
                          sum(writes.values()), "calls", goal=0.0))
    notes.append(f"kill -9 phase: {dict(ops)} changes, a kill 0-1.5 s "
                 f"after each 1-3 of them; after half the kills the next "
                 f"changes did not wait for the daemon to be ready")
