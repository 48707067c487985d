"""Readiness of the node's data plane with the OVS binding, beside
``ovsdb``: each named after what is broken, as CNI STATUS and the node's
record read them (:mod:`kuryr_supervisor.health.dataplane`):

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
  (STATUS 51).
* ``datapath``: ovs-vswitchd answers and has a datapath for the
  integration bridge (``dpif/show``). Without it nothing is forwarded
  (STATUS 51).

A node that is not an OVN chassis (``external_ids:ovn-remote`` unset: an
OVS agent's node) passes ``ovn-controller`` and ``flows`` saying so.

Readiness, never liveness: restarting the daemon fixes none of these.
Each is an I/O check sharing the ``ovsdb`` check's held connection
(:attr:`OvsdbCheck.db <kuryr_supervisor.health.checks.ovsdb.OvsdbCheck.db>`)
and bounded like it (``[binding] ovsdb_timeout``; every question to a
daemon a second, OpenFlow two): a hung ovn-controller, ovs-vswitchd or
ovsdb-server fails the check, never the HealthManager.
"""
from __future__ import annotations

from oslo_config import cfg

from kuryr_supervisor.cni import ovsdb
from kuryr_supervisor.cni.ovsdb import daemons, ovnlocal
from kuryr_supervisor.health.checks.base import Check, Kind, Result, Sort
from kuryr_supervisor.health.checks.ovsdb import OvsdbCheck

#: Names of the ports a failing ``flows`` message lists at most.
NAMES_SHOWN = 3


class _OvsCheck(Check):
    """What the three share: the held connection, the bound, the daemons'
    run directories."""

    kind = Kind.READINESS
    sort = Sort.IO

    def __init__(self, conf: cfg.ConfigOpts, db: OvsdbCheck) -> None:
        self.conf = conf
        self._db = db

    def timeout(self) -> float | None:
        return float(self.conf.binding.ovsdb_timeout)

    @property
    def ovn(self) -> ovnlocal.OvnLocal:
        return ovnlocal.OvnLocal(self._db.db, self.conf.binding.ovn_rundir)

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


class FlowsCheck(_OvsCheck):
    name = "flows"

    def run(self, now: float) -> Result:
        ovn = self.ovn
        try:
            if not self._chassis():
                return Result.passed(NOT_CHASSIS)
            rows = self._db.db.our_interfaces()
        except ovsdb.OvsdbError as exc:
            return Result.failed(f"cannot tell: {exc}")
        try:
            if ovn.flows_processed() == 0:
                return Result.failed("ovn-controller has not processed the "
                                     "logical flows yet")
        except daemons.DaemonError:
            pass                # ovn-controller's own check names it
        ports = {str(r["name"]): int(r["ofport"]) for r in rows
                 if ovnlocal.installed(r) and isinstance(r.get("ofport"), int)
                 and r["ofport"] > 0}
        if not ports:
            return Result.passed("no port of ours installed by OVN yet")
        bridge = self.conf.binding.ovs_bridge
        try:
            counts = self.vswitchd.flow_counts(sorted(ports.values()))
        except daemons.DaemonError as exc:
            return Result.failed(str(exc))
        bare = sorted(n for n, p in ports.items() if not counts.get(p))
        if bare:
            shown = ", ".join(bare[:NAMES_SHOWN]) + (
                ", ..." if len(bare) > NAMES_SHOWN else "")
            return Result.failed(
                f"{bridge} has no flows for {len(bare)} of {len(ports)} "
                f"ports OVN installed ({shown}): their pods have no network",
                value=float(len(bare)))
        return Result.passed(f"{bridge} holds the flows of all {len(ports)} "
                             "ports OVN installed", value=0.0)


class DatapathCheck(_OvsCheck):
    name = "datapath"

    def run(self, now: float) -> Result:
        bridge = self.conf.binding.ovs_bridge
        try:
            found = self.vswitchd.datapath()
        except daemons.DaemonError as exc:
            return Result.failed(str(exc))
        return Result.passed(f"{bridge} on datapath {found}")


def ovs_checks(conf: cfg.ConfigOpts) -> list[Check]:
    """``ovsdb`` and the data-plane checks that share its connection."""
    db = OvsdbCheck(conf)
    return [db, OvnControllerCheck(conf, db), FlowsCheck(conf, db),
            DatapathCheck(conf, db)]
