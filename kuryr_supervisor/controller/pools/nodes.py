"""Which nodes get a port pool: those that run pods on the pod network.

Pool ports are bound to a node (``binding:host_id``), so each node has its
own pool (:mod:`.portpools`). The controller watches pods, not Nodes: a
node gets a pool when a pod that needs a port is first seen on it (the
first list of a process counts every pod already running, so nodes busy at
start get theirs at once; a new node's first pod is a miss, as in Kuryr),
and keeps it while it runs such pods. A node left without any (drained, or
deleted from the API: Kubernetes deletes its pods) keeps its pool
``ports_pool_node_idle`` more seconds, then the pool's ports are given back
to Neutron. Nodes found only through the ports of a restart's list (a node
that had a pool) start that wait at once.

The handler's thread writes (``place``, ``leave``, ``replace``), the refill
thread reads (``wanted``): one lock, held for a dict update.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable


class PoolNodes:
    """Pods per node, and since when a node has had none (see module)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        #: pod UID -> its node (pods that need a port, on a node)
        self._where: dict[str, str] = {}
        self._count: Counter[str] = Counter()
        #: node -> when it was left without a pod (or first heard of)
        self._empty_at: dict[str, float] = {}

    def place(self, uid: str, node: str) -> bool:
        """Pod ``uid`` runs on ``node``; True when the node is new here."""
        if not node:
            return False
        with self._lock:
            old = self._where.get(uid)
            if old == node:
                return False
            if old is not None:
                self._drop(uid)
            new = not self._count[node] and node not in self._empty_at
            self._where[uid] = node
            self._count[node] += 1
            self._empty_at.pop(node, None)
            return new

    def leave(self, uid: str) -> None:
        with self._lock:
            self._drop(uid)

    def __contains__(self, uid: object) -> bool:
        with self._lock:
            return uid in self._where

    def replace(self, placed: Iterable[tuple[str, str]]) -> bool:
        """Every pod at once (a list): nodes left without pods start
        their wait, those already waiting keep their start; True when a
        node is new here."""
        with self._lock:
            old = set(self._count)
            known = old | set(self._empty_at)
            self._where, self._count = {}, Counter()
            for uid, node in placed:
                if node:
                    self._where[uid] = node
                    self._count[node] += 1
            now = self._clock()
            for node in old - set(self._count):
                self._empty_at.setdefault(node, now)
            for node in self._count:
                self._empty_at.pop(node, None)
            return bool(set(self._count) - known)

    def heard_of(self, node: str) -> None:
        """A node named by a pool port (a restart's list): kept for the
        idle time unless a pod shows up."""
        if not node:
            return
        with self._lock:
            if not self._count[node]:
                self._empty_at.setdefault(node, self._clock())

    def wanted(self, idle: float) -> list[str]:
        """Nodes whose pools are kept and refilled: those with pods, and
        those without for less than ``idle`` seconds (0: forever)."""
        now = self._clock()
        with self._lock:
            out = [n for n, c in self._count.items() if c]
            for node, since in list(self._empty_at.items()):
                if idle <= 0 or now - since < idle:
                    out.append(node)
                else:
                    del self._empty_at[node]
        return sorted(out)

    def _drop(self, uid: str) -> None:
        node = self._where.pop(uid, None)
        if node is None:
            return
        self._count[node] -= 1
        if self._count[node] <= 0:
            del self._count[node]
            self._empty_at[node] = self._clock()
