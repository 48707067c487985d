"""The ``netlink`` liveness check: a short-lived IPRoute socket reads ``lo``.

It replaces Kuryr's IPDB-per-probe: it runs on the HealthManager's timer (not
per request) through an injected probe callable, by default
:func:`kuryr_supervisor.cni.netlink.probe`, which opens and closes its own handle.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from kuryr_supervisor.cni import netlink
from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort
from kuryr_supervisor.state import LiveCause


class NetlinkCheck(Check):
    name = "netlink"
    kind = Kind.LIVENESS
    sort = Sort.IO
    cause = LiveCause.NETLINK

    def __init__(self, probe: Callable[[], None] = netlink.probe, *,
                 timer: Callable[[], float] = time.perf_counter) -> None:
        self._probe = probe
        self._timer = timer

    def run(self, now: float) -> Result:
        started = self._timer()
        try:
            self._probe()
        except Exception as exc:  # noqa: BLE001 - any failure is "unusable"
            return Result.failed(str(exc) or type(exc).__name__)
        elapsed = (self._timer() - started) * 1000
        return Result.passed(f"netlink usable ({elapsed:.1f} ms)")
