"""Who is to blame for the probes that failed between nodes' canaries.

Each node probes a sample of its peers' canaries and writes what it
reached in its record. A failed probe a→b says something is wrong between
a and b; whether it is a's fault, b's, or the underlay's, only the other
probes tell (as a third witness does):

* **outbound**: a node that fails most of its probes (at least
  :data:`MIN_EVIDENCE`) to peers that *other* nodes reach cannot reach
  peers that reach each other: its own data plane is broken
  (``KuryrPeersUnreachable``);
* **inbound**: a node that most of its probers (at least
  :data:`MIN_EVIDENCE`) fail to reach, while those probers reach other
  nodes, has a canary nobody reaches (``KuryrCanaryUnreachable``);
* probes to or from a node that says itself its data plane is broken, or
  one already blamed, are explained by it; a probe of an address that is
  not the target's canary now (its canary down, or made again), or of a
  peer the controller did not assign the prober (its record's spec), is
  no evidence at all: a record cannot witness against a node it was never
  told to probe; blame is assigned round by
  round until nothing changes, so one isolated node does not make its
  probers look broken;
* what stays unexplained (most of a node's remaining probes fail, with no
  witness that the targets are fine: two nodes that cannot reach each
  other, or an underlay that fails everyone) is *degraded*: counted as
  trouble for the cluster-wide judgement, never blamed on one node.

Pure: the reports in, the blame out.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Set

from kuryr_supervisor.netcheck.codecs.record import NetworkReport

#: Probes (or probers) a node needs before it can be blamed.
MIN_EVIDENCE = 2

Edge = tuple[str, str, bool]


@dataclasses.dataclass(frozen=True)
class Blame:
    """The outcome for one node."""

    outbound: tuple[str, ...] = ()    # peers it failed that others reach
    inbound: tuple[str, ...] = ()     # probers that failed to reach it
    degraded: bool = False            # unexplained failures (see module)
    probes: int = 0                   # its probes counted
    probers: int = 0                  # probes of it counted


def edges(reports: Mapping[str, NetworkReport],
          assigned: Mapping[str, Set[str]]) -> list[Edge]:
    """(prober, target, reached) between judged nodes, one per pair: a
    probe of an address that is not the target's canary now (its canary
    down, or another port made in its place), or of a peer not among the
    prober's ``assigned``, says nothing of it."""
    out: dict[tuple[str, str], bool] = {}
    for source, report in reports.items():
        mine = assigned.get(source, frozenset())
        for probe in report.peers:
            target = reports.get(probe.node)
            if target is None or probe.node == source or \
                    probe.node not in mine or target.canary is None or \
                    target.canary.address != probe.address:
                continue
            out[(source, probe.node)] = probe.reached
    return [(a, b, ok) for (a, b), ok in sorted(out.items())]


def _reached_by_others(all_edges: list[Edge], target: str,
                       but: str) -> bool:
    return any(ok and b == target and a != but for a, b, ok in all_edges)


def _reaches_others(all_edges: list[Edge], prober: str, but: str) -> bool:
    return any(ok and a == prober and b != but for a, b, ok in all_edges)


def attribute(reports: Mapping[str, NetworkReport],
              assigned: Mapping[str, Set[str]],
              self_faulty: Collection[str] = ()) -> dict[str, Blame]:
    """Blame for every node of ``reports`` (see the module);
    ``assigned``: each node's peers as the controller assigned them;
    ``self_faulty``: nodes that say their own data plane is broken."""
    all_edges = edges(reports, assigned)
    blamed: dict[str, Blame] = {}
    explained = set(self_faulty)
    while True:
        found: dict[str, Blame] = {}
        for node in reports:
            if node in explained or node in blamed:
                continue
            outs = [(b, ok) for a, b, ok in all_edges
                    if a == node and b not in explained and b not in blamed]
            ins = [(a, ok) for a, b, ok in all_edges
                   if b == node and a not in explained and a not in blamed]
            out_bad = tuple(b for b, ok in outs if not ok and
                            _reached_by_others(all_edges, b, node))
            in_bad = tuple(a for a, ok in ins if not ok and
                           _reaches_others(all_edges, a, node))
            out_hit = len(outs) >= MIN_EVIDENCE and 2 * len(out_bad) > len(outs)
            in_hit = len(ins) >= MIN_EVIDENCE and 2 * len(in_bad) > len(ins)
            if out_hit or in_hit:
                found[node] = Blame(out_bad if out_hit else (),
                                    in_bad if in_hit else (),
                                    probes=len(outs), probers=len(ins))
        if not found:
            break
        blamed.update(found)
    out: dict[str, Blame] = {}
    for node in reports:
        if node in blamed:
            out[node] = blamed[node]
            continue
        results = [ok for a, b, ok in all_edges if a == node and
                   b not in explained and b not in blamed]
        failed = results.count(False)
        out[node] = Blame(degraded=failed > 0 and 2 * failed > len(results),
                          probes=len(results))
    return out
