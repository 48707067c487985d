"""Readiness ``ovsdb`` (``[binding] driver = ovs``): Open vSwitch's
database answers and the integration bridge is in it.

Without either every ADD fails (code 11, never counted), so the node must
leave the kubelet's rotation and say why; restarting the daemon fixes
neither, so it is readiness, never liveness. An I/O check on the
HealthManager's timer, over the HealthManager's own held OVSDB connection
(:class:`~kuryr_supervisor.cni.ovsdb.Ovsdb`, opened at the first run, after
the fork): each run is one round trip bounded by ``[binding]
ovsdb_timeout``, which is also the check's deadline, so a hung
ovsdb-server fails the check, never the HealthManager. Other checks of the
node's OVS or OVN state share that connection (:attr:`OvsdbCheck.db`).
"""
from __future__ import annotations

import time
from collections.abc import Callable

from oslo_config import cfg

from kuryr_supervisor.cni import ovsdb
from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort

Connect = Callable[[cfg.ConfigOpts], ovsdb.Ovsdb]


def _connect(conf: cfg.ConfigOpts) -> ovsdb.Ovsdb:
    return ovsdb.Ovsdb(conf.binding.ovsdb_connection,
                       conf.binding.ovsdb_timeout,
                       bridge=conf.binding.ovs_bridge)


class OvsdbCheck(Check):
    name = "ovsdb"
    kind = Kind.READINESS
    sort = Sort.IO

    def __init__(self, conf: cfg.ConfigOpts, *, connect: Connect = _connect,
                 timer: Callable[[], float] = time.perf_counter) -> None:
        self.conf = conf
        self._connect = connect
        self._timer = timer
        self._db: ovsdb.Ovsdb | None = None

    @property
    def db(self) -> ovsdb.Ovsdb:
        """The HealthManager's OVSDB connection, made at first use."""
        if self._db is None:
            self._db = self._connect(self.conf)
        return self._db

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
