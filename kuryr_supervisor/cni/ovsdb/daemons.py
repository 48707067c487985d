"""The OVS and OVN daemons' control sockets, and what ovs-vswitchd says of
the integration bridge: its datapath and its flows.

A daemon's control socket is ``<rundir>/<daemon>.<pid>.ctl`` (the pid from
``<daemon>.pid``), or ``<rundir>/<daemon>.ctl`` when it was started with
that ``--unixctl``; it is asked with the same JSON-RPC as ``ovs-appctl``
(:func:`unixctl`), each question bounded in time. Open vSwitch's run
directory is the one of the database socket the binding connects to
(``unix:/run/openvswitch/db.sock``: ``/run/openvswitch``), where
ovs-vswitchd keeps its control socket and each bridge's OpenFlow
management socket (``<bridge>.mgmt``).
"""
from __future__ import annotations

import os
from collections.abc import Sequence

from kuryr_supervisor.cni.ovsdb import openflow, wire

#: Seconds one question to a daemon's control socket may take.
CTL_TIMEOUT = 1.0
#: Open vSwitch's run directory when the database is not a local socket.
OVS_RUNDIR = "/run/openvswitch"


class DaemonError(Exception):
    """The daemon could not be asked (not running, silent, refused)."""


def unixctl(path: str, command: str, *args: str,
            timeout: float = CTL_TIMEOUT) -> str:
    """One ``ovs-appctl``-style command on the control socket ``path``;
    its text (wire.WireError or wire.RpcError when it fails)."""
    channel = wire.Channel(wire.connect(f"unix:{path}", timeout),
                           os.path.basename(path))
    try:
        return str(channel.call(command, list(args), timeout))
    finally:
        channel.close()


def control_socket(rundir: str, daemon: str) -> str | None:
    """``daemon``'s control socket under ``rundir``, when one exists."""
    try:
        with open(os.path.join(rundir, f"{daemon}.pid")) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        pid = 0
    for name in ((f"{daemon}.{pid}.ctl",) if pid else ()) + (f"{daemon}.ctl",):
        path = os.path.join(rundir, name)
        if os.path.exists(path):
            return path
    return None


def ask(rundir: str, daemon: str, command: str, *args: str,
        timeout: float = CTL_TIMEOUT) -> str:
    """``daemon``'s answer to ``command``; DaemonError saying why not."""
    path = control_socket(rundir, daemon)
    if path is None:
        raise DaemonError(f"{daemon} is not running (no pidfile and control "
                          f"socket under {rundir})")
    try:
        return unixctl(path, command, *args, timeout=timeout).strip()
    except wire.RpcError as exc:
        raise DaemonError(f"{daemon} refused {command}: {exc}") from exc
    except wire.WireError as exc:
        raise DaemonError(f"{daemon} does not answer on its control "
                          f"socket: {exc}") from exc


def rundir_of(connection: str) -> str:
    """Open vSwitch's run directory for the database ``connection``."""
    kind, _, path = connection.partition(":")
    return os.path.dirname(path) if kind == "unix" and path else OVS_RUNDIR


def datapath_of(dpif_show: str, bridge: str) -> str | None:
    """The datapath (``netdev@ovs-netdev``) ``dpif/show`` lists ``bridge``
    under; None when it lists it under none."""
    datapath = None
    for line in dpif_show.splitlines():
        if line and not line[0].isspace():
            datapath = line.split(":", 1)[0]
        elif line.strip() == f"{bridge}:" and datapath:
            return datapath
    return None


class Vswitchd:
    """ovs-vswitchd under ``rundir``, for the integration bridge
    ``bridge``."""

    def __init__(self, rundir: str, bridge: str) -> None:
        self.rundir, self.bridge = rundir, bridge

    def datapath(self) -> str:
        """The bridge's datapath as ovs-vswitchd has it; DaemonError when
        ovs-vswitchd cannot say or has none for it."""
        found = datapath_of(ask(self.rundir, "ovs-vswitchd", "dpif/show"),
                            self.bridge)
        if found is None:
            raise DaemonError(f"ovs-vswitchd has no datapath for "
                              f"{self.bridge} (dpif/show lists it under "
                              "none)")
        return found

    def flow_counts(self, ofports: Sequence[int], *,
                    timeout: float = 2.0) -> dict[int, int]:
        """ofport -> flows of table 0 classifying what it sends;
        DaemonError when the bridge cannot be asked."""
        path = os.path.join(self.rundir, f"{self.bridge}.mgmt")
        try:
            return openflow.flow_counts(path, ofports, timeout=timeout)
        except openflow.OpenFlowError as exc:
            raise DaemonError(f"cannot read {self.bridge}'s flows: {exc}") \
                from exc
