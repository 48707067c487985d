"""Readiness of the node's data plane with the OVS binding, beside
``ovsdb``: each named after what is broken, as CNI STATUS and the node's
record read them (:mod:`kuryr_supervisor.netcheck.node.dataplane`):

* ``ovn-controller``: ovn-controller runs, answers on its control socket
  and is connected to the Southbound database (``connection-status``, as
  OVN-Kubernetes' readiness asks). Without it new ports get no flows;
  the running pods keep theirs (STATUS 50). Running but not connected is
  a *shared* failure (:attr:`Result.shared <kuryr_supervisor.health.
  checks.base.Result.shared>`): every node meets it at once when the
  database fails.
* ``flows``: ovn-controller has processed the logical flows once
  (``coverage/read-counter lflow_run``, as OVN-Kubernetes reads it) and
  the integration bridge holds flows for every port of ours that OVN
  marked ``ovn-installed``, asked of the switch itself over OpenFlow (the
  mark stays when the flows go). Without them those pods have no network
  (STATUS 51). Pods coming and going are no fault (see
  :class:`FlowsCheck`).
* ``datapath``: ovs-vswitchd answers and has a datapath for the
  integration bridge (``dpif/show``). Without it nothing is forwarded
  (STATUS 51).

A node that is not an OVN chassis (``external_ids:ovn-remote`` unset: an
OVS agent's node) passes ``ovn-controller`` and ``flows`` saying so.

Readiness, never liveness: restarting the daemon fixes none of these.
Each is an I/O check sharing the ``ovsdb`` check's held connection
(:func:`~kuryr_supervisor.health.checks.ovsdb.connection`, handed to all
four by :func:`ovs_checks`) and bounded like it (``[binding] ovsdb_timeout``; every question to a
daemon a second, OpenFlow two): a hung ovn-controller, ovs-vswitchd or
ovsdb-server fails the check, never the HealthManager.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from oslo_config import cfg

from kuryr_supervisor.cni import ovsdb
from kuryr_supervisor.cni.ovsdb import daemons, ovnlocal
from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort
from kuryr_supervisor.health.checks.ovsdb import OvsdbCheck

#: Names of the ports a failing ``flows`` message lists at most.
NAMES_SHOWN = 3
#: Seconds between a ``flows`` run's two looks at a port without flows.
SETTLE = 0.5

#: ofports -> their flow counts (the switch's, over OpenFlow)
FlowCounts = Callable[[Sequence[int]], Mapping[int, int]]


class _OvsCheck(Check):
    """What the three share: the held connection, the bound, the daemons'
    run directories."""

    kind = Kind.READINESS
    sort = Sort.IO

    def __init__(self, conf: cfg.ConfigOpts, db: ovsdb.Ovsdb) -> None:
        self.conf = conf
        self._db = db

    def timeout(self) -> float | None:
        return float(self.conf.binding.ovsdb_timeout)

    @property
    def ovn(self) -> ovnlocal.OvnLocal:
        return ovnlocal.OvnLocal(self._db, self.conf.binding.ovn_rundir)

    @property
    def vswitchd(self) -> daemons.Vswitchd:
        binding = self.conf.binding
        return daemons.Vswitchd(daemons.rundir_of(binding.ovsdb_connection),
                                binding.ovs_bridge)

    def _chassis(self) -> bool:
        """Whether this node is an OVN chassis (OvsdbError when the
        database cannot say)."""
        return self.ovn.is_chassis()


NOT_CHASSIS = ("not an OVN chassis (Open_vSwitch external_ids:ovn-remote "
               "is not set): nothing of OVN's to check")


class OvnControllerCheck(_OvsCheck):
    name = "ovn-controller"

    def run(self, now: float) -> Result:
        try:
            if not self._chassis():
                return Result.passed(NOT_CHASSIS)
            ok, text, answered = self.ovn.connected()
        except ovsdb.OvsdbError as exc:
            return Result.failed(f"cannot tell: {exc}")
        # Running but off the Southbound database: what every node meets
        # at once when the database or the way to it fails.
        return Result(ok, text, shared=not ok and answered)


@dataclasses.dataclass(frozen=True)
class _Port:
    """A port of ours as one row of the database had it: the row (a port
    deleted and made again under its name is another) and its ofport."""

    row: str
    ofport: int


class FlowsCheck(_OvsCheck):
    """``flows``, which pods coming and going never fail.

    The check reads our installed Interfaces from the monitor, then asks
    the switch for their flows: a pod's DEL commits the port's removal in
    between (or the monitor has not had it yet), ovn-controller takes the
    flows away at once, and the port, read installed, has none. So a port
    found without flows is looked at again in the database itself, asked
    after the flow read: one whose row is gone or made again (a DEL, an
    ADD again under the same name, an ofport given to a new port) or no
    longer ``ovn-installed`` was being taken away, and is not counted. ovn-controller removes a released port's flows (its Neutron
    port deleted, its ``iface-id`` repointed) and its ``ovn-installed``
    mark in separate writes, the mark maybe an iteration later: a port
    still bare and marked is looked at once more, :data:`SETTLE` seconds
    later, and fails the check only if it is still so. A port that truly
    lost its flows fails it within the run; the rest costs nothing while
    every port has its flows. ``counts`` and ``sleep`` are for tests."""

    name = "flows"

    def __init__(self, conf: cfg.ConfigOpts, db: ovsdb.Ovsdb, *,
                 counts: FlowCounts | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(conf, db)
        self._counts = counts
        self._sleep = sleep

    def run(self, now: float) -> Result:
        ovn = self.ovn
        try:
            if not self._chassis():
                return Result.passed(NOT_CHASSIS)
            rows = self._db.our_interfaces()
        except ovsdb.OvsdbError as exc:
            return Result.failed(f"cannot tell: {exc}")
        try:
            if ovn.flows_processed() == 0:
                return Result.failed("ovn-controller has not processed the "
                                     "logical flows yet")
        except daemons.DaemonError:
            pass                # ovn-controller's own check names it
        ports = {str(r["name"]): _Port(str(r.get("_uuid", "")), r["ofport"])
                 for r in rows
                 if ovnlocal.installed(r) and isinstance(r.get("ofport"), int)
                 and r["ofport"] > 0}
        if not ports:
            return Result.passed("no port of ours installed by OVN yet")
        bridge = self.conf.binding.ovs_bridge
        try:
            bare, gone = self._bare(ports)
            if bare:
                self._sleep(SETTLE)
                bare, went = self._bare(bare)
                gone += went
        except daemons.DaemonError as exc:
            return Result.failed(str(exc))
        except ovsdb.OvsdbError as exc:
            return Result.failed(f"cannot tell: {exc}")
        counted = len(ports) - gone
        if not counted:
            return Result.passed("no port of ours installed by OVN yet")
        if bare:
            names = sorted(bare)
            shown = ", ".join(names[:NAMES_SHOWN]) + (
                ", ..." if len(names) > NAMES_SHOWN else "")
            return Result.failed(
                f"{bridge} has no flows for {len(bare)} of {counted} "
                f"ports OVN installed ({shown}): their pods have no network",
                value=float(len(bare)))
        return Result.passed(f"{bridge} holds the flows of all {counted} "
                             "ports OVN installed", value=0.0)

    def _bare(self, ports: dict[str, _Port]) -> tuple[dict[str, _Port], int]:
        """The ports of ``ports`` the switch has no flows for and the
        database, asked after, still has as read and installed; and how
        many others had none because they were going (see the class)."""
        counts = self._flow_counts(sorted({p.ofport for p in ports.values()}))
        suspects = {n: p for n, p in ports.items() if not counts.get(p.ofport)}
        if not suspects:
            return {}, 0
        now = {str(r["name"]): r for r in self._db.our_interfaces_now()}
        bare = {n: p for n, p in suspects.items() if _same(now.get(n), p)}
        return bare, len(suspects) - len(bare)

    def _flow_counts(self, ofports: Sequence[int]) -> Mapping[int, int]:
        if self._counts is not None:
            return self._counts(ofports)
        return self.vswitchd.flow_counts(ofports)


def _same(row: dict[str, Any] | None, port: _Port) -> bool:
    """Whether ``row`` is still ``port``'s, with its ofport, installed."""
    return (row is not None and str(row.get("_uuid", "")) == port.row
            and row.get("ofport") == port.ofport and ovnlocal.installed(row))


class DatapathCheck(_OvsCheck):
    name = "datapath"

    def run(self, now: float) -> Result:
        bridge = self.conf.binding.ovs_bridge
        try:
            found = self.vswitchd.datapath()
        except daemons.DaemonError as exc:
            return Result.failed(str(exc))
        return Result.passed(f"{bridge} on datapath {found}")


def ovs_checks(conf: cfg.ConfigOpts, db: ovsdb.Ovsdb) -> list[Check]:
    """``ovsdb`` and the data-plane checks, over one held connection
    ``db`` (:func:`~kuryr_supervisor.health.checks.ovsdb.connection`)."""
    return [OvsdbCheck(conf, db), OvnControllerCheck(conf, db),
            FlowsCheck(conf, db), DatapathCheck(conf, db)]
