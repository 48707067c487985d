"""The OVSDB adapter: the only code that talks to Open vSwitch's database
(and to the OVS/OVN daemons' control sockets), with the standard library
alone (JSON-RPC over the socket, RFC 7047).

Why no library: measured against ovsdbapp and the ``ovs`` package's IDL
(``doc/source/measurements.rst``), a held connection of our own costs the
least memory per worker and a transaction a fraction of a millisecond, and
keeps a worker free of a second event loop.

Parts, one reason to change each:

* :mod:`.wire` -- JSON-RPC framing, calls bounded in time, the peer's echo;
* :mod:`.rows` -- OVSDB values, monitored tables, the local replica;
* :mod:`.connection` -- one held connection: opened after the fork by the
  process that uses it, reconnected with backoff, a monitor kept current,
  every call bounded (:class:`OvsdbUnavailable` when the database does not
  answer in time, :class:`OvsdbError` when it refuses);
* :mod:`.vswitch` -- the Open_vSwitch schema as the OVS binding and the
  health checks use it (:class:`Ovsdb`: ports, our Interfaces and their
  ``ovn-installed``, what the node is);
* :mod:`.ovnlocal` -- what can be told locally of OVN: whether the node is
  an OVN chassis, ovn-controller's connection to the Southbound database
  (its control socket), why a port was not installed;
* :mod:`.daemons` -- the OVS and OVN daemons' control sockets, and what
  ovs-vswitchd says of the integration bridge (its datapath, its flows:
  :mod:`.openflow`, the bridge's OpenFlow management socket).

Users (the OVS binding, the ``ovsdb`` readiness check, network health)
import from this package only.
"""
from __future__ import annotations

from kuryr_supervisor.cni.ovsdb.connection import (
    Connection,
    OvsdbError,
    OvsdbUnavailable,
)
from kuryr_supervisor.cni.ovsdb.vswitch import MARK, OVN_INSTALLED, Ovsdb

__all__ = ["MARK", "OVN_INSTALLED", "Connection", "Ovsdb", "OvsdbError",
           "OvsdbUnavailable"]
