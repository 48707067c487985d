"""Whom each node's canary probes, and how often: the probing shared out.

Nodes whose canary is up (plugged and said so in their record) stand on
a ring in name order; each probes the next ``k`` on it (``k`` =
``[network_health] canary_peers``, at most the others' count). So every
node is probed by exactly ``k`` others (the judge needs at least two
witnesses before it blames a canary nobody reaches), a node joining or
leaving moves the samples of ``k`` nodes only, and no node reads anyone's
record but its own.

The interval grows with the node count so the cluster's probes stay
within ``probe_rate`` per second whatever its size: a round is the
gateway and ``k`` peers per node, so ``n * (k + 1) / probe_rate``
seconds, never less than ``probe_interval``.

Pure: names and numbers in, each node's share out.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from kuryr_supervisor.netcheck.codecs.canaryspec import (
    MAX_INTERVAL,
    Assignment,
    CanaryPort,
    Target,
)
from kuryr_supervisor.netcheck.codecs.record import MAX_PEERS


def ring(up: Sequence[str], node: str, k: int) -> tuple[str, ...]:
    """The ``k`` nodes after ``node`` on the ring of ``up`` (sorted);
    none for a node not on it."""
    if node not in up:
        return ()
    at = up.index(node)
    count = min(k, len(up) - 1, MAX_PEERS)
    return tuple(up[(at + i) % len(up)] for i in range(1, count + 1))


def interval(nodes: int, k: int, base: float, rate: float) -> float:
    """Seconds between two rounds (see the module)."""
    return min(MAX_INTERVAL, max(base, nodes * (k + 1) / rate))


def assign(nodes: Collection[str], ports: Mapping[str, CanaryPort],
           up: Collection[str], *, k: int, base: float,
           rate: float) -> dict[str, Assignment]:
    """Each of ``nodes``' assignment: its canary port (``ports``) and,
    when its canary is ``up``, its share of the probing."""
    circle = sorted(n for n in up if n in ports)
    every = interval(len(circle), min(k, max(len(circle) - 1, 0)), base,
                     rate)
    out = {}
    for node in nodes:
        port = ports.get(node)
        if port is None:
            out[node] = Assignment()
            continue
        peers = tuple(Target(peer, ports[peer].address.ip)
                      for peer in ring(circle, node, k))
        out[node] = Assignment(port, peers,
                               every if node in circle else 0.0)
    return out
