"""The network judge as tables of timelines: records written at given times
(through the record book, as the handler feeds it), the judge run every
second on a fake clock, and what it says at given times."""
from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from kuryr_supervisor.netcheck.codecs import canaryspec as cs
from kuryr_supervisor.netcheck.codecs import record as nn
from kuryr_supervisor.netcheck.judge import judge as rules
from kuryr_supervisor.netcheck.judge.records import RecordBook
from kuryr_supervisor.state.lostports import LostPort, LostPorts
from kuryr_supervisor.state.netverdicts import KINDS

NODES5 = ("a", "b", "c", "d", "e")


def canary(node: str) -> str:
    """``node``'s canary address (each node's its own)."""
    return f"10.0.{sum(node.encode()) % 250}.{len(node) + 10}"


def report(*, ready: bool = True, checks: Mapping[str, bool] | None = None,
           gateway: bool | None = None,
           peers: Mapping[str, bool] | None = None) -> nn.NetworkReport:
    return nn.NetworkReport(
        nn.Daemon(ready, 0.0, "live, ready" if ready else "not ready: x"),
        tuple(nn.LocalCheck(name, ok, "ok" if ok else "broken")
              for name, ok in (checks or {}).items()),
        None if gateway is None else nn.Probe("", "10.0.0.1", gateway),
        tuple(nn.Probe(p, canary(p), ok) for p, ok in (peers or {}).items()))


def mesh(nodes: Sequence[str], broken: Callable[[str, str], bool]
         ) -> dict[str, nn.NetworkReport]:
    """Every node probes every other; ``broken(a, b)``: a→b fails."""
    return {a: report(peers={b: not broken(a, b) for b in nodes if b != a})
            for a in nodes}


@dataclasses.dataclass
class World:
    """The book, the judge's state and a clock; :meth:`write` a record as
    a node would (and the node writes it again every 60 s, its heartbeat,
    until :meth:`silence`), :meth:`run` the judge every second up to a
    time."""

    now: float = 0.0
    params: rules.Params = rules.Params()
    state: rules.State = dataclasses.field(default_factory=rules.State)

    def __post_init__(self) -> None:
        self.book = RecordBook(lambda: self.now)
        self.versions = 0
        self.assigned: dict[str, tuple[str, ...]] = {}
        self.reports: dict[str, nn.NetworkReport] = {}
        self.written: dict[str, float] = {}
        self.silent: set[str] = set()
        self.last: rules.Judgement | None = None
        self.history: list[tuple[float, rules.Judgement]] = []

    def write(self, node: str, rep: nn.NetworkReport, heartbeat: int = 60,
              assigned: Sequence[str] | None = None) -> None:
        """As ``node`` writes it (its canary up unless ``rep`` says), in
        a record whose spec assigns it ``assigned`` (by default the peers
        it probes), as the controller's canaries do."""
        if rep.canary is None:
            rep = dataclasses.replace(rep, canary=nn.Canary(canary(node),
                                                            f"port-{node}"))
        self.versions += 1
        self.reports[node], self.written[node] = rep, self.now
        if assigned is not None:
            self.assigned[node] = tuple(assigned)
        peers = self.assigned.get(node, tuple(p.node for p in rep.peers))
        obj = nn.body(node, "")
        obj["spec"] = cs.spec(node, cs.Assignment(None, tuple(
            cs.Target(p, ipaddress.IPv4Address(canary(p))) for p in peers),
            2.0 if peers else 0.0))
        obj["metadata"]["resourceVersion"] = str(self.versions)
        obj["status"] = nn.status(rep, heartbeat_seconds=heartbeat,
                                  wall=1.7e9 + self.now)
        self.book.upsert(obj)

    def write_all(self, reports: Mapping[str, nn.NetworkReport]) -> None:
        for node, rep in reports.items():
            self.write(node, rep)

    def silence(self, node: str) -> None:
        self.silent.add(node)

    def run(self, until: float, *, every: float = 1.0) -> rules.Judgement:
        """Judge every ``every`` s up to ``until``, nodes beating."""
        while True:
            for node, rep in self.reports.items():
                if node not in self.silent and \
                        self.now - self.written[node] >= 60:
                    self.write(node, rep)
            self.state, self.last = rules.judge(self.state, self.book.seen,
                                                self.now, self.params)
            self.history.append((self.now, self.last))
            if self.now >= until:
                return self.last
            self.now = round(self.now + every, 6)

    def faulty(self) -> set[str]:
        assert self.last is not None
        return {n for n, v in self.last.verdicts.items() if v.faulty}

    def first(self, predicate: Callable[[rules.Judgement], bool]) -> float:
        return next(t for t, j in self.history if predicate(j))


def healthy(nodes: Sequence[str] = NODES5, **kwargs: Any
            ) -> dict[str, nn.NetworkReport]:
    return {n: report(checks={"ovsdb": True}, **kwargs) for n in nodes}


def test_a_healthy_cluster_stays_healthy() -> None:
    w = World()
    w.write_all(healthy())
    j = w.run(600)
    assert not w.faulty() and j.cluster is None and j.troubled == 0
    assert all(not v.suspect for v in j.verdicts.values())
    assert not any(jj.changed for _, jj in w.history)


def test_a_node_with_lost_pod_ports_is_no_fault() -> None:
    """One pod's lost port is that pod's problem (its Event tells to
    delete it), never the node's data plane's."""
    w = World()
    w.write_all(healthy())
    w.run(60)
    lost = LostPorts(3, (LostPort("default", "web-1", "p2", "another MAC"),))
    w.write("c", dataclasses.replace(report(checks={"ovsdb": True}),
                                     lost=lost))
    assert w.book.seen["c"].record.report.lost == lost
    j = w.run(600)
    assert not w.faulty() and j.troubled == 0
    assert not j.verdicts["c"].suspect


FAULT_AFTER = rules.Params().fault_after


@pytest.mark.parametrize(("symptom", "reason", "after"), [
    ({"checks": {"ovsdb": False}}, "KuryrLocalCheckFailed", FAULT_AFTER),
    ({"checks": {"ovsdb": True}, "gateway": False},
     "KuryrGatewayUnreachable", FAULT_AFTER),
    ({"ready": False, "checks": {"ovsdb": True}}, "KuryrDaemonNotReady",
     30.0),
])
def test_one_node_local_fault_and_recovery(symptom: dict[str, Any],
                                           reason: str, after: float) -> None:
    w = World()
    w.write_all(healthy())
    w.run(100)
    w.write("c", report(**symptom))
    start = w.now
    w.run(start + after - 1)
    assert not w.faulty() and w.last is not None
    # A data-plane symptom is suspect until held long enough; a daemon
    # not ready is no symptom at all within its grace (an upgrade).
    assert w.last.verdicts["c"].suspect is (after == FAULT_AFTER)
    w.run(start + after)
    assert w.faulty() == {"c"} and w.last.cluster is None
    verdict = w.last.verdicts["c"]
    assert verdict.reason == reason and w.last.changed == (("c", True),)
    # Recovery: healthy again only after recover_after (30 s) clean.
    w.write("c", healthy(["c"])["c"])
    back = w.now
    w.run(back + 29)
    assert w.faulty() == {"c"}
    w.run(back + 30)
    assert not w.faulty() and w.last.changed == (("c", False),)


def test_a_stale_record_is_a_local_fault_after_heartbeat_plus_grace() -> None:
    w = World()
    w.write_all(healthy())
    w.silence("c")                  # c wrote at 0 and never again
    w.run(90)
    assert not w.faulty()
    w.run(91)
    assert w.faulty() == {"c"}
    assert w.last is not None
    assert w.last.verdicts["c"].reason == "KuryrRecordStale"
    # A heartbeat every 60 s keeps the others fresh: only c.
    w.run(400)
    assert w.faulty() == {"c"}


def test_most_nodes_failing_together_is_cluster_wide_and_no_node_moves() -> None:
    w = World()
    w.write_all(healthy())
    w.run(100)
    for i, node in enumerate(("a", "b", "c")):     # the Southbound DB stops
        w.now = 100 + i
        w.write(node, report(checks={"ovn-controller": False}))
    j = w.run(400)
    assert j.cluster is not None and j.cluster.kind == "ovn-controller"
    assert "Southbound" in j.cluster.message and "3 of 5" in j.cluster.message
    assert w.first(lambda jj: jj.cluster is not None) == 102  # the third
    assert not any(v.faulty for _, jj in w.history
                   for v in jj.verdicts.values())
    assert not any(jj.changed for _, jj in w.history)
    # Over once trouble stays at or below half for cluster_settle (60 s).
    w.write_all(healthy(["a", "b", "c"]))
    back = w.now
    w.run(back + 59)
    assert w.last is not None and w.last.cluster is not None
    w.run(back + 60)
    assert w.last.cluster is None and not w.faulty()


def test_first_signs_of_a_cluster_wide_fault_are_withdrawn() -> None:
    w = World()
    w.write_all(healthy())
    w.run(10)
    w.write("a", report(checks={"ovn-controller": False}))
    w.run(20)                                   # a has its 5 s: faulty
    assert w.faulty() == {"a"}
    w.now = 40
    w.write("b", report(checks={"ovn-controller": False}))
    w.write("c", report(checks={"ovn-controller": False}))
    j = w.run(41)
    assert j.cluster is not None and not w.faulty()
    assert w.first(lambda jj: bool(jj.withdrawn)) == 40
    withdrawn = next(jj for _, jj in w.history if jj.withdrawn)
    assert withdrawn.withdrawn == ("a",)


def test_an_old_local_fault_is_kept_through_a_cluster_wide_fault() -> None:
    w = World()
    w.write_all(healthy())
    w.write("a", report(checks={"flows": False}))
    w.run(200)
    assert w.faulty() == {"a"}
    for node in ("b", "c", "d"):
        w.write(node, report(checks={"flows": False}))
    j = w.run(300)
    assert j.cluster is not None and w.faulty() == {"a"} and not j.withdrawn
    # a node recovering during a cluster-wide fault is not moved either
    w.write("a", healthy(["a"])["a"])
    j = w.run(400)
    assert j.cluster is not None and w.faulty() == {"a"}


def test_after_a_cluster_wide_fault_a_node_still_failing_needs_its_time() -> None:
    w = World()
    w.write_all({n: report(checks={"ovn-controller": False}) for n in NODES5})
    w.run(100)
    w.write_all(healthy(["a", "b", "c", "d"]))   # e is slow to reconnect
    end = w.now + 60
    w.run(end)
    assert w.last is not None and w.last.cluster is None
    assert not w.faulty()
    w.run(end + FAULT_AFTER - 1)
    assert not w.faulty()
    w.run(end + FAULT_AFTER)
    assert w.faulty() == {"e"}


def test_an_isolated_node_is_blamed_by_the_probes_alone() -> None:
    """d's tunnel endpoint is down: nobody reaches d, d reaches nobody;
    the others' failures towards d are d's, not theirs."""
    w = World()
    w.write_all(mesh(NODES5, lambda a, b: "d" in (a, b)))
    j = w.run(10)
    assert w.faulty() == {"d"} and j.cluster is None and j.troubled == 1
    assert j.verdicts["d"].reason == "KuryrPeersUnreachable"
    assert "4 of 4 peers" in j.verdicts["d"].message


def test_a_canary_nobody_reaches_is_blamed_inbound() -> None:
    """d's canary port is gone: d still reaches the others."""
    w = World()
    w.write_all(mesh(NODES5, lambda a, b: b == "d"))
    j = w.run(10)
    assert w.faulty() == {"d"}
    assert j.verdicts["d"].reason == "KuryrCanaryUnreachable"


def test_probes_nobody_assigned_are_no_evidence() -> None:
    """Three records claim they cannot reach d's canary, but the
    controller assigned them other peers (a ring of two: a→b, c; b→c, e;
    c→e, a): their probes of d say nothing, and d stays healthy, while
    the same failures among assigned peers would have blamed it."""
    ring = {"a": ("b", "c"), "b": ("c", "e"), "c": ("e", "a"),
            "d": ("e", "a"), "e": ("a", "b")}
    w = World()
    for node, peers in ring.items():
        probes = {p: True for p in peers}
        if node in ("a", "b", "c"):
            probes["d"] = False         # probes nobody asked for
        w.write(node, report(peers=probes), assigned=peers)
    j = w.run(10)
    assert not w.faulty() and j.cluster is None, j.verdicts
    assert j.troubled == 0
    # The same records, the controller assigning d to its probers: blamed.
    for node in ("a", "b", "c"):
        w.write(node, w.reports[node], assigned=(*ring[node], "d"))
    w.run(20)
    assert w.faulty() == {"d"}
    assert w.last is not None
    assert w.last.verdicts["d"].reason == "KuryrCanaryUnreachable"


def test_probes_of_a_canary_that_is_not_there_are_no_evidence() -> None:
    """d's canary is down (its port deleted, d says so) or made again at
    another address, while the others still probe the old one and fail:
    that proves nothing of d."""
    reports = mesh(NODES5, lambda a, b: b == "d")
    for node_canary in (nn.Canary("", ""), nn.Canary("10.0.99.99", "new")):
        reports["d"] = dataclasses.replace(reports["d"], canary=node_canary)
        w = World()
        w.write_all(reports)
        j = w.run(60)
        assert w.faulty() == set() and j.troubled == 0, j.verdicts["d"]


def test_a_node_that_says_it_is_broken_explains_the_probes_to_it() -> None:
    reports = mesh(NODES5, lambda a, b: "d" in (a, b))
    reports["d"] = dataclasses.replace(reports["d"], checks=(
        nn.LocalCheck("ovn-controller", False, "not connected"),))
    w = World()
    w.write_all(reports)
    j = w.run(10)
    assert w.faulty() == {"d"}
    assert j.verdicts["d"].reason == "KuryrLocalCheckFailed"
    assert j.troubled == 1


def test_an_underlay_that_fails_everyone_is_cluster_wide() -> None:
    w = World()
    w.write_all(mesh(NODES5, lambda a, b: True))
    j = w.run(100)
    assert j.cluster is not None and j.cluster.kind == "peers"
    assert "underlay" in j.cluster.message and not w.faulty()


def test_a_partition_in_two_halves_blames_no_node() -> None:
    nodes = ("a", "b", "c", "d")
    w = World()
    w.write_all(mesh(nodes, lambda a, b: (a < "c") != (b < "c")))
    j = w.run(100)
    assert not w.faulty() and j.cluster is not None


@pytest.mark.parametrize(("nodes", "failing", "local", "cluster"), [
    (("a",), {"a"}, set(), True),             # one node: never local
    (("a", "b"), {"a"}, {"a"}, False),        # two: the other is fine
    (("a", "b"), {"a", "b"}, set(), True),    # two failing: the cloud's
    (("a", "b", "c"), {"a"}, {"a"}, False),
    (("a", "b", "c"), {"a", "b"}, set(), True),
])
def test_small_clusters(nodes: tuple[str, ...], failing: set[str],
                        local: set[str], cluster: bool) -> None:
    w = World()
    w.write_all({n: report(checks={"ovsdb": n not in failing})
                 for n in nodes})
    j = w.run(100)
    assert w.faulty() == local and (j.cluster is not None) is cluster
    if cluster and len(nodes) < 3:
        assert j.cluster is not None and "too few nodes" in j.cluster.message


def test_two_nodes_that_cannot_reach_each_other_blame_neither() -> None:
    w = World()
    w.write_all(mesh(("a", "b"), lambda a, b: True))
    j = w.run(100)
    assert not w.faulty() and j.cluster is not None


def test_a_flapping_node_is_held_faulty() -> None:
    w = World()
    w.write_all(healthy())
    bad = report(checks={"ovsdb": False})
    good = healthy(["c"])["c"]
    turned = []
    for _ in range(3):                      # 3 faults within 10 minutes
        w.write("c", bad)
        w.run(w.now + FAULT_AFTER)
        turned.append(w.now)
        w.write("c", good)
        w.run(w.now + 30)
    assert len([1 for _, j in w.history if ("c", True) in j.changed]) == 3
    # The third recovery needs flap_hold (300 s), not recover_after.
    assert w.faulty() == {"c"}
    w.run(w.now + 269)
    assert w.faulty() == {"c"}
    w.run(w.now + 1)
    assert not w.faulty()


def test_a_vanished_record_is_no_longer_judged() -> None:
    w = World()
    w.write_all(healthy())
    w.write("c", report(checks={"ovsdb": False}))
    w.run(20)
    assert w.faulty() == {"c"}
    w.book.delete({"metadata": {"name": "c"}})
    j = w.run(21)
    assert "c" not in j.verdicts and not w.faulty()


def test_a_relist_does_not_make_a_silent_node_fresh() -> None:
    w = World()
    w.write_all(healthy())
    w.run(80)
    c = w.book.seen["c"]
    assert c.seen_at == 60.0
    obj = nn.body("c", "")
    obj["metadata"]["resourceVersion"] = c.record.resource_version
    obj["status"] = nn.status(c.record.report, heartbeat_seconds=60, wall=0)
    w.now = 85
    w.book.replace_all([obj], "99")     # the others vanish, c is the same
    assert w.book.seen["c"].seen_at == 60.0 and set(w.book.seen) == {"c"}


def test_a_spec_written_by_the_controller_does_not_make_a_node_fresh() -> None:
    """The controller writes the spec (a canary, the cluster's verdict):
    a new version of the record, but not the node's write."""
    w = World()
    w.write_all(healthy())
    w.silence("c")                      # c wrote at 0 and never again
    w.run(80)
    again = nn.body("c", "")
    again["metadata"]["resourceVersion"] = "99"
    again["spec"]["cluster"] = {}
    again["status"] = nn.status(w.reports["c"], heartbeat_seconds=60,
                                wall=1.7e9)     # as c wrote it at 0
    w.book.upsert(again)
    assert w.book.seen["c"].seen_at == 0.0
    assert w.book.seen["c"].record.resource_version == "99"
    w.run(91)
    assert w.faulty() == {"c"}
    assert w.last is not None
    assert w.last.verdicts["c"].reason == "KuryrRecordStale"


def test_due_is_when_a_verdict_turns_by_the_clock_alone() -> None:
    """Judged only when a record arrives and when :func:`rules.due` says,
    a symptom turns into a fault exactly ``fault_after`` after it was
    seen, a recovery ``recover_after`` after it, a stale record heartbeat
    plus grace after its write; nothing is due on a quiet cluster but the
    stale deadlines."""
    w = World()
    w.write_all(healthy())
    w.run(100)                          # every node wrote again at 60
    w.now = 100.25
    w.state, _ = rules.judge(w.state, w.book.seen, w.now)
    assert rules.due(w.state, w.book.seen, w.now) == pytest.approx(
        60 + 60 + 30, abs=0.01)
    w.write("c", report(checks={"ovsdb": False}))
    w.state, j = rules.judge(w.state, w.book.seen, w.now)
    assert j.verdicts["c"].suspect
    at = rules.due(w.state, w.book.seen, w.now)
    assert at == pytest.approx(100.25 + FAULT_AFTER, abs=0.01)
    w.state, j = rules.judge(w.state, w.book.seen, at)
    assert j.changed == (("c", True),)
    w.now = at + 2
    w.write("c", healthy(["c"])["c"])
    w.state, _ = rules.judge(w.state, w.book.seen, w.now)
    back = rules.due(w.state, w.book.seen, w.now)
    assert back == pytest.approx(w.now + 30.0, abs=0.01)
    w.state, j = rules.judge(w.state, w.book.seen, back - 0.01)
    assert not j.changed
    w.state, j = rules.judge(w.state, w.book.seen, back)
    assert j.changed == (("c", False),)


def test_a_new_leader_carries_on_the_faults_it_finds() -> None:
    w = World(state=rules.seed({"c": ("KuryrPeersUnreachable", "x", 0.0)},
                               0.0))
    w.write_all(healthy())
    w.run(29)
    assert w.faulty() == {"c"}
    assert w.last is not None
    assert w.last.verdicts["c"].reason == "KuryrPeersUnreachable"
    w.run(30)
    assert not w.faulty()


def test_an_invalid_record_keeps_the_last_valid_one() -> None:
    w = World()
    w.write_all(healthy())
    w.book.upsert({"metadata": {"name": "c", "resourceVersion": "x"},
                   "spec": {"nodeName": "other"}, "status": {}})
    assert w.book.seen["c"].record.resource_version == "3"
    w.silence("c")
    w.run(91)
    assert w.faulty() == {"c"}          # and it goes stale


def test_cluster_kinds_are_the_metric_vocabulary() -> None:
    assert tuple(rules.LIKELY) == KINDS


def test_a_carried_fault_keeps_its_age_through_a_cluster_wide_fault() -> None:
    """A fault the new leader found marked 10 minutes ago is no first sign
    of a cluster-wide fault that begins now: it is kept; one marked just
    before is withdrawn."""
    for age, kept in ((600.0, True), (5.0, False)):
        w = World(state=rules.seed({"a": ("KuryrPeersUnreachable", "x", age)},
                                   0.0))
        w.write_all(healthy())
        for node in ("b", "c", "d"):
            w.write(node, report(checks={"flows": False}))
        j = w.run(1)
        assert j.cluster is not None
        assert (w.faulty() == {"a"}) is kept
