"""Benchmark policy — NetworkPolicy as Neutron security groups whose rules
name address groups, on the real OVN stack.

The tests' stack (tests/fixtures/ovn: OVN central, two nodes, Neutron
ML2/OVN on the real Keystone and MariaDB), the Kubernetes API a fake the
benchmark writes pods, namespaces and NetworkPolicies into, and a
controller daemon with the ``neutron_port`` and ``network_policy``
handlers (every option at its default but the resync). In one run:

* **size**: three policies (ingress from a pod selector on two ports;
  from a namespace and pod selector, and an ipBlock with two excepts;
  egress to a pod selector on TCP and UDP) over 10, 50 and 100 pods
  selected (each also a peer): the security-group rules Neutron holds
  for each policy, beside what a per-pod-IP scheme (one rule per peer
  address and port, as Kuryr wrote them) needs for the same policies
  and pods, computed;
* **calls**: pods (ports already made) relabelled one at a time into the
  selected set: the handler's Neutron writes per pod, by kind;
* **latency** (100 pods present): a server and a client pod plugged on
  the two nodes; a policy created that selects the server and not the
  client → the client's first probe of five in a row refused, p50 and
  p99; the client relabelled into the policy's peers → the first of five
  answered (and back → refused), p50 and p99. References measured in
  the same run: the same watch after the one Neutron call the data plane
  needs by hand (the server's port put in a deny group; the client's
  address added to, then removed from, an address group a rule names).

* **fresh pods**: a pod a policy selects from its creation, probed by a
  client the policy does not admit as soon as it is plugged: probes
  answered (goal 0), beside pods no policy selects probed the same way;
* **faults** (:mod:`.policychurn`): 50 kill -9 of the whole controller
  through policy creates, replacements and deletes and pod relabels:
  groups and address groups left, duplicated or missing, and ports not
  in their groups, once it settles; then a restart's Neutron writes.

``--quick``: 10 pods at most, 3 samples, 5 kills. The client's watch sends a TCP
connection every 100 ms, each given 0.5 s, until five in a row say the
change (:mod:`.policywatch`); 10 samples of each latency.
"""
from __future__ import annotations

import time
from typing import Any

from benchmarks.context import Context, Outcome
from benchmarks.policychurn import churn
from benchmarks.policycluster import NS, Cluster, per_pod_ip_rules
from benchmarks.policywatch import Watch
from benchmarks.stats import Figure, summarize

NAME = "policy"
GOAL_CREATE_S = 2.0
GOAL_RELABEL_S = 1.0
GOAL_CALLS = 1.0
PEER = {"role": "peer"}


def _size(c: Cluster, ctx: Context, figures: list[Figure],
          raw: dict[str, Any]) -> None:
    before = c.total()
    uids = c.size_policies()
    sizes = [n for n in (10, 50, 100) if n <= ctx.scale(100, 10)]
    raw["size"] = {}
    for n in sizes:
        c.selected_pods(n)
        c.settle(f"{n} pods selected", before)
        before = c.total()
        ours = c.rules_of(uids)
        theirs = per_pod_ip_rules(c.api)
        raw["size"][n] = {"ours": ours, "per_pod_ip": theirs}
        for name in uids:
            figures.append(Figure(
                NAME, f"rules of policy {name} at {n} selected pods",
                ours[name], "rules", reference=theirs[name],
                reference_label="per-pod-IP rules"))


def _calls(c: Cluster, ctx: Context, figures: list[Figure],
           raw: dict[str, Any]) -> None:
    count = ctx.scale(10, 3)
    spares = c.spare_pods(count)
    c.settle("spare pods")
    per_pod: list[dict[str, float]] = []
    for key in spares:
        before = c.writes()
        c.api.modify_pod(*key, labels=dict(c.SELECTED))
        c.settle(f"{key} joins", sum(before.values()))
        after = c.writes()
        joined = {k: after[k] - before.get(k, 0.0) for k in after}
        joined["peer sets"] = float(c.peer_sets_of(key))
        per_pod.append(joined)
    raw["calls"] = per_pod
    pods = len(per_pod)
    sets = sum(p["peer sets"] for p in per_pod)
    port = sum(p.get("port", 0.0) for p in per_pod)
    members = sum(p.get("members", 0.0) for p in per_pod)
    other = sum(v for p in per_pod for k, v in p.items()
                if k not in ("port", "members", "peer sets"))
    figures.append(Figure(NAME, "Neutron writes per pod added to a selected "
                                "set (its port's groups)", port / pods,
                          "calls", goal=GOAL_CALLS))
    figures.append(Figure(NAME, "Neutron writes per peer set a pod joins "
                                "(its address group's members)",
                          members / sets if sets else float("nan"),
                          "calls", goal=GOAL_CALLS))
    figures.append(Figure(NAME, f"  peer sets each pod joined "
                                f"({pods} pods)", sets / pods, "sets"))
    figures.append(Figure(NAME, "  other Neutron writes per pod (groups, "
                                "rules)", other / pods, "calls"))


def _pct(samples: list[float]) -> dict[str, float]:
    return summarize(samples) if samples else {"median": float("nan"),
                                               "p99": float("nan"), "n": 0}


def _latency(c: Cluster, ctx: Context, figures: list[Figure],
             raw: dict[str, Any], notes: list[str]) -> None:
    server, client = c.plugged()
    watch = Watch(client, server.address)
    count = ctx.scale(10, 3)
    made, ref_made, join, leave, ref_join, ref_leave = (
        [], [], [], [], [], [])
    deny = c.deny_group()
    refgroup, refag = c.reference_groups()

    crashes = c.crashes

    def created(i: int) -> tuple[float | None, float | None]:
        # created → refused; the reference: the port put in a deny group
        got = watch.change(False, lambda: c.put_server_policy(f"p{i}"))
        c.delete_server_policy(f"p{i}")
        watch.change(True, lambda: None)
        ref = watch.change(False, lambda: c.server_groups([deny]))
        c.server_groups(None)
        watch.change(True, lambda: None)
        return got, ref
    for i in range(count):
        got, ref = crashes.sample(lambda i=i: created(i))
        made.append(got)
        ref_made.append(ref)
    before = c.total()
    c.put_server_policy("peers")
    c.settle("the peers' policy", before)
    watch.change(False, lambda: None)
    for _ in range(count):
        got, ref = crashes.sample(lambda: (
            watch.change(True, lambda: c.client_labels(PEER)),
            watch.change(False, lambda: c.client_labels({}))))
        join.append(got)
        leave.append(ref)
    before = c.total()
    c.delete_server_policy("peers")
    c.settle("the peers' policy deleted", before)
    c.server_groups([refgroup])
    watch.change(False, lambda: None)
    for _ in range(count):
        got, ref = crashes.sample(lambda: (
            watch.change(True, lambda: c.ag_members(
                refag, add=client.address)),
            watch.change(False, lambda: c.ag_members(
                refag, remove=client.address))))
        ref_join.append(got)
        ref_leave.append(ref)
    c.server_groups(None)
    raw["latency"] = {"created": made, "ref_created": ref_made,
                      "joined": join, "ref_joined": ref_join,
                      "left": leave, "ref_left": ref_leave}
    for label, ours, ref, goal in (
            ("policy created → first refused probe", made, ref_made,
             GOAL_CREATE_S),
            ("pod relabelled into the peers → admitted", join, ref_join,
             GOAL_RELABEL_S),
            ("pod relabelled out of the peers → refused", leave, ref_leave,
             GOAL_RELABEL_S)):
        got = [x for x in ours if x is not None]
        want = [x for x in ref if x is not None]
        if len(got) < len(ours) or len(want) < len(ref):
            notes.append(f"{label}: {len(ours) - len(got)} (ours), "
                         f"{len(ref) - len(want)} (reference) samples never "
                         f"followed within the watch's limit")
        s, r = _pct(got), _pct(want)
        for q in ("median", "p99"):
            figures.append(Figure(
                NAME, f"{label} {'p50' if q == 'median' else 'p99'} "
                f"({s['n']} samples, {len(c.api.pods)} pods)", s[q], "s",
                reference=r[q], reference_label="one Neutron call by hand",
                goal=goal if q == "p99" else None))


def _fresh(c: Cluster, ctx: Context, figures: list[Figure],
           raw: dict[str, Any]) -> None:
    """Pods a policy selects from their creation, each probed by a client
    the policy does not admit as soon as it is plugged (its ADD
    returned); the reference, pods no policy selects, probed the same
    way (every probe must be answered, or the probe proves nothing)."""
    c.api.put_networkpolicy(NS, "fresh", {
        "podSelector": {"matchLabels": {"fresh": "yes"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": PEER}}],
                     "ports": [{"port": 80}]}]})
    c.settle("the fresh pods' policy")
    nodes = c.stack.fabric.nodes
    client = (NS, "client")
    count = ctx.scale(10, 3)
    admitted, answered, sent = 0, 0, 0
    for i in range(count):
        for selected in (True, False):
            pod = c.pods.make(NS, f"fresh-{i}-{'y' if selected else 'n'}",
                              nodes[i % 2], {"fresh": "yes" if selected
                                             else "no"}, [("http", 80,
                                                           "TCP")])
            got = c.crashes.sample(lambda a=pod.address: sum(c.pods.probe(
                [(client, a, 80, "TCP")] * 5, timeout=0.5)))
            if selected:
                admitted += got
                sent += 5
            else:
                answered += got
    raw["fresh"] = {"pods": count, "probes": sent, "admitted": admitted,
                    "reference_answered": answered}
    figures.append(Figure(
        NAME, f"probes wrongly admitted by a pod its policy selects, "
        f"sent as its ADD returned ({count} pods, {sent} probes)",
        float(admitted), "probes", goal=0.0,
        reference=float(answered),
        reference_label="answered by pods no policy selects (of the same "
                        "number)"))
    c.api.delete_networkpolicy(NS, "fresh")


def run(ctx: Context) -> Outcome:
    from tests.fixtures.ovn.fabric import available
    from tests.fixtures.ovn.stack import OvnStack
    from tests.fixtures.realcloud import RealCloud
    why = available()
    if why:
        raise RuntimeError(f"OVN data plane unavailable: {why}")
    figures: list[Figure] = []
    raw: dict[str, Any] = {}
    notes: list[str] = []
    cloud = RealCloud()
    stack: OvnStack | None = None
    try:
        started = time.monotonic()
        cloud.start()
        stack = OvnStack(cloud).start()
        figures.append(Figure(NAME, "cold start: real cloud + OVN stack",
                              time.monotonic() - started, "s"))
        c = Cluster(ctx, stack)
        try:
            c.start()
            _size(c, ctx, figures, raw)
            _calls(c, ctx, figures, raw)
            _latency(c, ctx, figures, raw, notes)
            _fresh(c, ctx, figures, raw)
            churn(c, ctx, figures, raw, notes)
            log = c.daemon.log_path.read_text(errors="replace")
            if " ERROR " in log or "Traceback" in log:
                notes.append(f"the controller's log has ERROR lines or a "
                             f"traceback: {c.daemon.log_path}")
            notes += [f"sampled again after an Open vSwitch abort: {line}"
                      for line in c.crashes.lines]
            refused = [line for line in log.splitlines()
                       if "Neutron refuses" in line]
            notes += [f"refused: {line[:300]}" for line in refused[:5]]
        finally:
            c.close()
    finally:
        if stack is not None:
            stack.close()
        cloud.close()
    notes.append("a pod added to the size phase's selected set also joins "
                 "the two peer sets of its policies (each an address "
                 "group: one members call each) and its port gets its "
                 "groups (one port call)")
    notes.append("per-pod-IP rules: one rule per peer pod's address (or "
                 "CIDR of an ipBlock less its excepts) and port entry, "
                 "computed for "
                 "the same policies and pods; a latency sample is late by "
                 "at most one attempt of the watch (100 ms), as its "
                 "reference is")
    return Outcome(figures, raw=raw, notes=notes)
