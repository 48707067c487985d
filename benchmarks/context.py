"""What the runner hands each benchmark, and what a benchmark hands back.

Benchmarks share one workspace and, where a default-configured daemon will
do, one daemon and one pair of plugins (started on first use), so the CNI
benchmarks compare the same daemon with the same reference. A benchmark that
needs other options or a fresh process asks the workspace for its own.
"""
from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from benchmarks import plugins
from benchmarks.harness import BenchDaemon, Workspace
from benchmarks.stats import Figure

N = TypeVar("N", int, float)


@dataclasses.dataclass
class Outcome:
    """Figures for the table, plus raw samples and notes for the JSON."""

    figures: list[Figure]
    raw: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)


class Context:
    """The workspace, scale factor and lazily started shared daemon."""

    def __init__(self, ws: Workspace, *, quick: bool = False) -> None:
        self.ws, self.quick = ws, quick
        self._daemon: BenchDaemon | None = None
        self._plugins: tuple[plugins.Plugin, ...] | None = None
        self._pools: dict[str, list[str]] = {}

    def scale(self, full: N, quick: N) -> N:
        """``full`` normally, ``quick`` under ``--quick`` (a smoke run of the harness)."""
        return quick if self.quick else full

    def daemon(self) -> BenchDaemon:
        """The shared daemon: production defaults, standalone."""
        if self._daemon is None:
            self._daemon = self.ws.daemon()
        return self._daemon

    def shims(self) -> list[plugins.Plugin]:
        """kuryr-cni (go), then kuryr-cni (python), both against the shared
        daemon and driven by cnitool."""
        return list(self._all_plugins()[:2])

    def reference(self) -> plugins.Plugin:
        """The reference bridge+host-local, driven by the same cnitool."""
        return self._all_plugins()[2]

    def _all_plugins(self) -> tuple[plugins.Plugin, ...]:
        if self._plugins is None:
            self._plugins = (plugins.kuryr(self.ws, self.daemon(), "go"),
                             plugins.kuryr(self.ws, self.daemon(), "python"),
                             plugins.reference(self.ws))
        return self._plugins

    def netns_pool(self, key: str, count: int) -> list[str]:
        """``count`` namespaces reused by every caller asking for ``key``.

        A DEL leaves a namespace as it found it, so bursts reuse theirs
        rather than paying ``ip netns add`` again.
        """
        pool = self._pools.setdefault(key, [])
        if len(pool) < count:
            pool += self.ws.netns(count - len(pool))
        return pool[:count]
