"""Readiness ``ovsdb`` (``[binding] driver = ovs``): Open vSwitch's
database answers and the integration bridge is in it.

Without either every ADD fails (code 11, never counted), so the node must
leave the kubelet's rotation and say why; restarting the daemon fixes
neither, so it is readiness, never liveness. An I/O check on the
HealthManager's timer, over the HealthManager's own held OVSDB connection
(:func:`connection`: a :class:`~kuryr_supervisor.cni.ovsdb.Ovsdb` made once
where the node's side of network health is assembled,
:mod:`kuryr_supervisor.netcheck.node.assembly`, and opened at its first
call, after the fork): each run is one round trip bounded by ``[binding]
ovsdb_timeout``, which is also the check's deadline, so a hung
ovsdb-server fails the check, never the HealthManager. The other checks of
the node's OVS or OVN state and the canary are handed the same connection.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from oslo_config import cfg

from kuryr_supervisor.cni import ovsdb
from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort


def connection(conf: cfg.ConfigOpts) -> ovsdb.Ovsdb:
    """The node's database as ``[binding]`` names it; nothing is
    connected until its first call (so it may be made before a fork and
    used after it)."""
    return ovsdb.Ovsdb(conf.binding.ovsdb_connection,
                       conf.binding.ovsdb_timeout,
                       bridge=conf.binding.ovs_bridge)


class OvsdbCheck(Check):
    name = "ovsdb"
    kind = Kind.READINESS
    sort = Sort.IO

    def __init__(self, conf: cfg.ConfigOpts, db: ovsdb.Ovsdb, *,
                 timer: Callable[[], float] = time.perf_counter) -> None:
        self.conf = conf
        self.db = db
        self._timer = timer

    def timeout(self) -> float | None:
        return float(self.conf.binding.ovsdb_timeout)

    def run(self, now: float) -> Result:
        db = self.db
        bridge = self.conf.binding.ovs_bridge
        started = self._timer()
        try:
            row = db.bridge(bridge)
        except ovsdb.OvsdbError as exc:
            return Result.failed(str(exc))
        if row is None:
            return Result.failed(
                f"integration bridge {bridge} is not in OVSDB "
                f"{db.connection} (OVN's controller or the OVS agent "
                "creates it)")
        elapsed = (self._timer() - started) * 1000
        kind = row.get("datapath_type") or "system"
        return Result.passed(f"OVSDB answers, {bridge} present "
                             f"(datapath {kind}, {elapsed:.1f} ms)")
