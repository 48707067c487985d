"""The judge: from every node's record and the clock, whose network is
broken, and whether it is the node's own fault or the cloud's.

Pure: :func:`judge` takes the state of the last call, what has been seen
of each record and the time, and returns the new state and a
:class:`Judgement`; nothing else is read, so the rules are tested as
tables of timelines (``tests/unit/test_network_judge.py``). Times are the
judge's own monotonic clock: when a record's write was *observed*, never
the node's clock (as the node lifecycle controller does with heartbeats),
so a node's clock skew cannot make it look stale or fresh.

Symptoms of one node (the first one names the cause):

1. ``KuryrRecordStale``: no write observed for the record's own heartbeat
   plus ``stale_grace`` (30 s): the daemon is gone or cannot reach the API;
2. ``KuryrDaemonNotReady``: its daemon has said not ready for
   ``daemon_grace`` (30 s);
3. ``KuryrLocalCheckFailed``: a local data-plane check fails
   (ovn-controller, flows, datapath, OVSDB);
4. ``KuryrGatewayUnreachable``: its canary cannot reach the gateway;
5. ``KuryrPeersUnreachable`` / ``KuryrCanaryUnreachable``: the probes
   blame it (:mod:`.reach`);
6. ``KuryrServicePathBroken``: its canary cannot reach the canary
   Service's VIP while the other nodes' do (:mod:`.servicepath`); when
   most cannot, it is trouble of kind ``services`` (the load balancer
   itself: Octavia, OVN Northbound), never a node's fault.

Rules:

* **cluster-wide**: when more than ``cluster_fraction`` (half) of the
  judged nodes have trouble at once (a symptom, or probes that fail with
  nobody to blame), it is the cloud's fault (Neutron, the Southbound
  database, the underlay): no node's verdict changes while it lasts, and
  local faults that began less than ``correlation`` (60 s) before it are
  withdrawn (they were its first signs). It ends once trouble has stayed at
  or below the fraction for ``cluster_settle`` (60 s); symptoms then need
  their full time again. A cluster of one node is never judged locally
  (its one node is always "most nodes"); of two, a node is blamed only
  when the other is fine.
* **local**: a node whose symptom has lasted ``fault_after`` (5 s; the
  stale and not-ready symptoms have their 30 s already) while the cluster
  is not in a cluster-wide fault.
* **recovery** (hysteresis): back to healthy after ``recover_after`` (30 s)
  without a symptom; a node that turned faulty ``flap_count`` (3) times
  within ``flap_window`` (10 min) needs ``flap_hold`` (5 min) instead, so
  a flapping node stays marked rather than blinking.
* a node with no record (or none valid yet) is not judged.
* a record's ``lostPorts`` (pods whose Neutron port was made again and
  whose interface the node cannot point at it) is never a symptom: each
  is one pod's problem (its Event ``PortLost`` tells to delete it), the
  node's data plane serves its other pods.
"""
from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Mapping, Sequence

from kuryr_supervisor.netcheck.codecs import conditions as nc
from kuryr_supervisor.netcheck.codecs.record import Record
from kuryr_supervisor.netcheck.judge import servicepath
from kuryr_supervisor.netcheck.judge.reach import Blame, attribute
from kuryr_supervisor.state.netverdicts import KINDS

#: Check names a cluster-wide cause may carry as a metric label; a node's
#: other names are "other-check" (labels stay bounded whatever nodes write).
KNOWN_CHECKS = KINDS[:5]
#: What each kind of trouble (:data:`~kuryr_supervisor.state.netverdicts.
#: KINDS`, in that order) points at when most nodes share it.
LIKELY = {
    "ovn-controller": "ovn-controller's connection to the OVN Southbound "
                      "database (or the database itself)",
    "flows": "the flows OVN installs (the Southbound database or "
             "ovn-northd)",
    "datapath": "Open vSwitch's datapath on the nodes",
    "ovsdb": "Open vSwitch on the nodes",
    "bridge": "the nodes' bridges",
    "other-check": "a data-plane dependency every node shares",
    "gateway": "the pod network's router (Neutron's L3)",
    "peers": "the underlay between nodes (tunnels, MTU, security groups)",
    "daemon": "kuryr-supervisor's daemons (or their dependencies)",
    "stale": "the nodes' way to the Kubernetes API (or the daemons)",
    "services": "the Services' load balancers (Octavia, its OVN provider "
                "or the OVN Northbound database)",
}
IMMEDIATE = ("KuryrRecordStale", "KuryrDaemonNotReady")


@dataclasses.dataclass(frozen=True)
class Params:
    daemon_grace: float = 30.0
    stale_grace: float = 30.0
    fault_after: float = 5.0
    recover_after: float = 30.0
    flap_count: int = 3
    flap_window: float = 600.0
    flap_hold: float = 300.0
    cluster_fraction: float = 0.5
    cluster_settle: float = 60.0
    correlation: float = 60.0


@dataclasses.dataclass(frozen=True)
class Seen:
    """A node's latest valid record as the judge observed it."""

    record: Record
    seen_at: float                    # first observation of this version
    not_ready_since: float | None = None   # daemon said not ready since
    #: The peers the controller assigned the node (its record's spec):
    #: only probes of these are evidence.
    assigned: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class Symptom:
    reason: str          # one of conditions.CAUSES
    kind: str            # the trouble's kind (see LIKELY)
    message: str


@dataclasses.dataclass(frozen=True)
class NodeState:
    faulty: bool = False
    since: float = 0.0                    # the verdict's start
    onset: float | None = None            # symptoms unbroken since
    clear: float | None = None            # no symptom since (while faulty)
    faults: tuple[float, ...] = ()        # when it turned faulty (flaps)
    reason: str = nc.REASON_HEALTHY
    message: str = ""


@dataclasses.dataclass(frozen=True)
class Cluster:
    since: float
    kind: str
    message: str
    below: float | None = None            # trouble at or below the share


@dataclasses.dataclass(frozen=True)
class State:
    nodes: Mapping[str, NodeState] = dataclasses.field(default_factory=dict)
    cluster: Cluster | None = None


@dataclasses.dataclass(frozen=True)
class Verdict:
    node: str
    faulty: bool
    reason: str
    message: str
    since: float
    suspect: bool = False        # a symptom not yet held long enough


@dataclasses.dataclass(frozen=True)
class Judgement:
    verdicts: Mapping[str, Verdict]
    cluster: Cluster | None
    troubled: int                  # nodes with trouble now
    judged: int                    # nodes with a valid record
    #: (node, turned faulty?) for each node whose verdict changed
    changed: tuple[tuple[str, bool], ...] = ()
    #: nodes whose local fault was withdrawn into a cluster-wide one
    withdrawn: tuple[str, ...] = ()


def seed(faults: Mapping[str, tuple[str, str, float]], now: float) -> State:
    """The state of a judge that starts while nodes are marked faulty
    (node -> (reason, message, seconds since it was marked), from their
    conditions): they stay so until proven healthy, their fault as old as
    the condition says (a cluster-wide fault that follows does not take it
    for one of its first signs)."""
    return State({node: NodeState(True, now - age, onset=now - age,
                                  faults=(now - age,), reason=reason,
                                  message=message)
                  for node, (reason, message, age) in faults.items()})


def _self_symptoms(seen: Seen, now: float, p: Params) -> list[Symptom]:
    record = seen.record
    age = now - seen.seen_at
    if age > record.heartbeat_seconds + p.stale_grace:
        return [Symptom("KuryrRecordStale", "stale",
                        f"its record has not been written for {age:.0f}s "
                        f"(heartbeat {record.heartbeat_seconds:.0f}s)")]
    out = []
    daemon = record.report.daemon
    if seen.not_ready_since is not None and \
            now - seen.not_ready_since >= p.daemon_grace:
        out.append(Symptom("KuryrDaemonNotReady", "daemon",
                           f"its kuryr-supervisor has not been ready for "
                           f"{now - seen.not_ready_since:.0f}s: "
                           f"{daemon.summary or 'no summary'}"))
    failed = [c for c in record.report.checks if not c.ok]
    if failed:
        kind = failed[0].name if failed[0].name in KNOWN_CHECKS \
            else "other-check"
        out.append(Symptom("KuryrLocalCheckFailed", kind, "; ".join(
            f"{c.name}: {c.message or 'failed'}" for c in failed)))
    gateway = record.report.gateway
    if gateway is not None and not gateway.reached:
        out.append(Symptom("KuryrGatewayUnreachable", "gateway",
                           f"its canary cannot reach the gateway "
                           f"{gateway.address}"))
    return out


def _blame_symptoms(blame: Blame) -> list[Symptom]:
    out = []
    if blame.outbound:
        out.append(Symptom(
            "KuryrPeersUnreachable", "peers",
            f"its canary cannot reach {len(blame.outbound)} of "
            f"{blame.probes} peers that other nodes reach "
            f"({', '.join(blame.outbound[:5])})"))
    if blame.inbound:
        out.append(Symptom(
            "KuryrCanaryUnreachable", "peers",
            f"{len(blame.inbound)} of {blame.probers} peers that reach "
            f"others cannot reach its canary "
            f"({', '.join(blame.inbound[:5])})"))
    return out


def symptoms(seen: Mapping[str, Seen], now: float, p: Params
             ) -> tuple[dict[str, list[Symptom]], set[str]]:
    """Every node's symptoms, and the nodes with trouble (a symptom, or
    probes failing with nobody to blame)."""
    own = {node: _self_symptoms(s, now, p) for node, s in seen.items()}
    fresh = {node: s.record.report for node, s in seen.items()
             if not any(x.reason == "KuryrRecordStale" for x in own[node])}
    blame = attribute(fresh, {n: s.assigned for n, s in seen.items()},
                      {n for n, s in own.items() if s})
    found = {node: own[node] + (_blame_symptoms(blame[node])
                                if node in blame else [])
             for node in seen}
    services = servicepath.attribute(fresh, {n for n, s in own.items() if s})
    for node, why in services.items():
        if why.local:
            found[node].append(_service_symptom(why))
    troubled = {n for n, s in found.items() if s}
    troubled |= {n for n, b in blame.items() if b.degraded}
    troubled |= set(services)
    return found, troubled


def _service_symptom(why: servicepath.ServiceBlame) -> Symptom:
    return Symptom(servicepath.REASON, servicepath.KIND,
                   f"its canary cannot reach the canary Service's VIP "
                   f"{why.address} that {why.reached_by} other node(s) "
                   f"reach (its load balancer's flows, or its way to them)")


def _cluster_kind(found: Mapping[str, list[Symptom]],
                  troubled: set[str], seen: Mapping[str, Seen]) -> str:
    def unexplained(node: str) -> str:
        """A node's trouble with no symptom of its own: its peers failing
        (the underlay) before its VIP failing (the load balancer)."""
        report = seen[node].record.report
        if any(not p.reached for p in report.peers) or \
                report.service is None or report.service.reached:
            return "peers"
        return servicepath.KIND
    kinds = collections.Counter(
        found[n][0].kind if found[n] else unexplained(n) for n in troubled)
    return sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


def _cluster_message(kind: str, troubled: int, judged: int) -> str:
    few = " (too few nodes to tell one node's fault from the cloud's)" \
        if judged < 3 else ""
    return (f"{troubled} of {judged} nodes report network trouble at once"
            f"{few}; most likely {LIKELY[kind]}; no Node condition changes "
            "while it lasts")


def _recover_time(node: NodeState, now: float, p: Params) -> float:
    recent = [t for t in node.faults if now - t <= p.flap_window]
    return p.flap_hold if len(recent) >= p.flap_count else p.recover_after


def _step(node: NodeState, found: Sequence[Symptom], now: float,
          p: Params) -> NodeState:
    """One node's verdict, outside a cluster-wide fault."""
    if found:
        first = found[0]
        onset = node.onset if node.onset is not None else now
        if node.faulty:
            return dataclasses.replace(node, onset=onset, clear=None,
                                       reason=first.reason,
                                       message=first.message)
        if first.reason in IMMEDIATE or now - onset >= p.fault_after:
            faults = tuple(t for t in node.faults
                           if now - t <= p.flap_window) + (now,)
            return NodeState(True, now, onset, None, faults, first.reason,
                             first.message)
        return dataclasses.replace(node, onset=onset)
    if not node.faulty:
        return dataclasses.replace(node, onset=None, clear=None,
                                   reason=nc.REASON_HEALTHY, message="")
    clear = node.clear if node.clear is not None else now
    if now - clear >= _recover_time(node, now, p):
        return NodeState(False, now, None, None, node.faults,
                         nc.REASON_HEALTHY, "")
    return dataclasses.replace(node, clear=clear, onset=None)


def judge(state: State, seen: Mapping[str, Seen], now: float,
          p: Params = Params()) -> tuple[State, Judgement]:
    """The new state and what it says (see the module)."""
    found, troubled = symptoms(seen, now, p)
    judged = len(seen)
    over = judged > 0 and len(troubled) > p.cluster_fraction * judged
    nodes = {n: state.nodes.get(n, NodeState(since=now)) for n in seen}
    cluster, withdrawn = state.cluster, []
    if cluster is None and over:
        kind = _cluster_kind(found, troubled, seen)
        cluster = Cluster(now, kind, _cluster_message(kind, len(troubled),
                                                      judged))
        for name, node in nodes.items():
            if node.faulty and now - node.since <= p.correlation:
                withdrawn.append(name)
                nodes[name] = NodeState(False, now, faults=node.faults[:-1])
    elif cluster is not None:
        if over:
            cluster = dataclasses.replace(cluster, below=None, message=(
                _cluster_message(cluster.kind, len(troubled), judged)))
        elif cluster.below is None:
            cluster = dataclasses.replace(cluster, below=now)
        elif now - cluster.below >= p.cluster_settle:
            cluster = None
            # Symptoms start afresh: a node still recovering from the
            # cloud's fault is not blamed for the tail of it.
            nodes = {n: dataclasses.replace(s, onset=None, clear=None)
                     for n, s in nodes.items()}
    changed = []
    if cluster is None:
        for name in nodes:
            before = nodes[name]
            nodes[name] = _step(before, found.get(name, ()), now, p)
            if nodes[name].faulty != before.faulty:
                changed.append((name, nodes[name].faulty))
    verdicts = {n: Verdict(n, s.faulty, s.reason, s.message, s.since,
                           suspect=not s.faulty and bool(found.get(n)))
                for n, s in nodes.items()}
    return (State(nodes, cluster),
            Judgement(verdicts, cluster, len(troubled), judged,
                      tuple(changed), tuple(withdrawn)))


def due(state: State, seen: Mapping[str, Seen], now: float,
        p: Params = Params()) -> float:
    """When a verdict may next change with no new record: a symptom held
    long enough, a record turning stale, a daemon's grace over, a recovery
    or a cluster-wide fault's settling complete (the earliest such time
    after ``now``; ``math.inf``: none). The handler judges then, so no
    verdict waits for the next periodic judgement."""
    times = []
    for name, s in seen.items():
        times.append(s.seen_at + s.record.heartbeat_seconds + p.stale_grace)
        if s.not_ready_since is not None:
            times.append(s.not_ready_since + p.daemon_grace)
        node = state.nodes.get(name)
        if node is not None and not node.faulty and node.onset is not None:
            times.append(node.onset + p.fault_after)
        elif node is not None and node.faulty and node.clear is not None:
            times.append(node.clear + _recover_time(node, now, p))
    cluster = state.cluster
    if cluster is not None and cluster.below is not None:
        times.append(cluster.below + p.cluster_settle)
    # A hair past each boundary: the rules compare with > and >=.
    return min((t + 1e-3 for t in times if t + 1e-3 > now), default=math.inf)

