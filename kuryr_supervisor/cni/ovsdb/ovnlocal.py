"""What a node can tell of OVN by itself: whether it is an OVN chassis,
ovn-controller's state, and why a port's flows are not installed.

A node holds no OVN Southbound credentials, so everything here is local:
the node's OVSDB (``Open_vSwitch`` ``external_ids``: ``ovn-remote``,
``system-id``, ``hostname``; our Interfaces' ``ovn-installed``, ``ofport``
and ``error``) through :class:`~.vswitch.Ovsdb`, and ovn-controller's own
control socket (:mod:`.daemons`), asked with the same JSON-RPC as
``ovn-appctl``: ``connection-status`` (its Southbound connection),
``coverage/read-counter lflow_run`` (whether it processed the logical
flows), ``version`` and ``debug/dump-local-bindings`` (the ports it has
claimed for this chassis). Each question is bounded (a second); the
readiness checks take a control socket that is missing or silent as
ovn-controller failing (:meth:`OvnLocal.connected`), the ADD's message
only as "unknown" (:meth:`OvnLocal.ask`).
"""
from __future__ import annotations

import contextlib
import logging
import re
from typing import Any

from kuryr_supervisor.cni.ovsdb import daemons
from kuryr_supervisor.cni.ovsdb.vswitch import OVN_INSTALLED, Ovsdb

LOG = logging.getLogger(__name__)

#: ovn-controller sets ``ovn-installed`` on Interfaces since this version.
INSTALLED_SINCE = (20, 6)


class OvnLocal:
    """OVN as seen from this node: ``ovsdb`` (the node's database) and
    ``rundir`` (where ovn-controller keeps its pidfile and control
    socket, ``[binding] ovn_rundir``)."""

    def __init__(self, ovsdb: Ovsdb, rundir: str = "/run/ovn") -> None:
        self.ovsdb = ovsdb
        self.rundir = rundir

    # -- the node ------------------------------------------------------------
    def is_chassis(self) -> bool:
        """Whether ovn-controller is configured on this node
        (``external_ids:ovn-remote``)."""
        return bool(self.ovsdb.node().get("ovn-remote"))

    def control_socket(self) -> str | None:
        """ovn-controller's control socket, when its pidfile names one
        that exists."""
        return daemons.control_socket(self.rundir, "ovn-controller")

    def ask(self, command: str, *args: str) -> str | None:
        """ovn-controller's answer to ``command``; None when it cannot be
        asked (no socket, no answer, an error)."""
        try:
            return self.asked(command, *args)
        except daemons.DaemonError as exc:
            LOG.debug("ovn-controller %s: %s", command, exc)
            return None

    def asked(self, command: str, *args: str) -> str:
        """ovn-controller's answer to ``command``; DaemonError saying why
        it cannot be had (not running, silent, refused)."""
        return daemons.ask(self.rundir, "ovn-controller", command, *args)

    def connected(self) -> tuple[bool, str, bool]:
        """Whether ovn-controller runs and is connected to the Southbound
        database, what it says (as OVN-Kubernetes' readiness asks:
        ``connection-status``), and whether it answered (False: it does
        not run or does not answer; True and not connected: it runs, the
        Southbound database is out of its reach)."""
        remote = self.ovsdb.node().get("ovn-remote", "")
        try:
            status = self.asked("connection-status")
        except daemons.DaemonError as exc:
            return False, str(exc), False
        if status != "connected":
            return False, (f"ovn-controller is not connected to the "
                           f"Southbound database ({remote}): {status}"), True
        return True, f"ovn-controller connected to the Southbound " \
                     f"database ({remote})", True

    def flows_processed(self) -> int:
        """How many times ovn-controller ran its logical flows
        (``coverage/read-counter lflow_run``: 0 until it processed them
        once, as OVN-Kubernetes' readiness reads it); DaemonError when it
        cannot be asked."""
        text = self.asked("coverage/read-counter", "lflow_run")
        try:
            return int(text)
        except ValueError as exc:
            raise daemons.DaemonError(f"ovn-controller answered lflow_run "
                                      f"{text[:40]!r}") from exc

    def version(self) -> tuple[int, int] | None:
        """ovn-controller's (major, minor), when it answers."""
        text = self.ask("version") or ""
        found = re.search(r"ovn-controller[^\d]*(\d+)\.(\d+)", text)
        return (int(found.group(1)), int(found.group(2))) if found else None

    def installs_flag(self) -> tuple[bool, str]:
        """Whether ovn-controller marks installed ports (``ovn-installed``)
        here, and why so judged: an OVN chassis whose ovn-controller is
        20.06 or later (or whose version cannot be asked: every supported
        release is)."""
        if not self.is_chassis():
            return False, "not an OVN chassis (Open_vSwitch " \
                          "external_ids:ovn-remote is not set)"
        version = self.version()
        if version is not None and version < INSTALLED_SINCE:
            return False, (f"ovn-controller {version[0]}.{version[1]:02d} "
                           "predates ovn-installed (20.06)")
        said = (f"ovn-controller {version[0]}.{version[1]:02d}"
                if version else "ovn-controller's version not known")
        return True, f"an OVN chassis ({said})"

    # -- a port --------------------------------------------------------------
    def why_not_installed(self, ifname: str, port_id: str) -> str:
        """What is missing for ``ovn-installed`` on our Interface
        ``ifname`` (the Neutron port ``port_id``), as far as the node can
        tell: the first cause found, in the order a port goes through."""
        with contextlib.suppress(Exception):
            row = self.ovsdb.our_interface(ifname)
            if row is None:
                return f"interface {ifname} is not in OVSDB"
            if row.get("error"):
                return (f"Open vSwitch could not add interface {ifname}: "
                        f"{row['error']}")
            if row.get("ofport") in (None, -1):
                return (f"ovs-vswitchd has not added interface {ifname} "
                        f"(ofport {row.get('ofport')})")
            node = self.ovsdb.node()
            if not node.get("system-id"):
                return ("no chassis for this node: Open_vSwitch "
                        "external_ids:system-id is not set")
            if not node.get("ovn-remote"):
                return ("not an OVN chassis: Open_vSwitch "
                        "external_ids:ovn-remote is not set")
            return self._controller(port_id, node)
        return "the node's OVSDB cannot be read"

    def _controller(self, port_id: str, node: dict[str, Any]) -> str:
        chassis = node.get("system-id", "")
        host = node.get("hostname") or chassis
        if self.control_socket() is None:
            return (f"ovn-controller is not running (no pidfile and control "
                    f"socket under {self.rundir})")
        status = self.ask("connection-status")
        if status is None:
            return "ovn-controller does not answer on its control socket"
        if status.strip() != "connected":
            return (f"ovn-controller is not connected to the Southbound "
                    f"database ({node.get('ovn-remote')}): "
                    f"{status.strip()}")
        bindings = self.ask("debug/dump-local-bindings")
        if bindings is not None and port_id not in bindings:
            return (f"port {port_id} is not claimed by this chassis "
                    f"({chassis}): is the Neutron port bound to this node "
                    f"(binding:host_id {host})?")
        return (f"ovn-controller (connected, chassis {chassis}) has not "
                f"installed the flows of port {port_id} yet")


def installed(row: dict[str, Any]) -> bool:
    """Whether our Interface's row says its flows are installed."""
    ids = row.get("external_ids") or {}
    return bool(ids.get(OVN_INSTALLED) == "true")
