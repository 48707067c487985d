"""Bindings: a pod's veth, its address and route, on a Linux bridge
(``[binding] driver = bridge``) or on Open vSwitch's integration bridge
(``driver = ovs``, :mod:`.ovs` and :mod:`.ovsports`; see there).

The same shape as the reference ``bridge`` CNI plugin, done with
:mod:`kuryr_supervisor.cni.netlink` (which imports pyroute2 only when CHECK
or GC first needs it): a veth pair whose pod end lives in the pod's
namespace under ``CNI_IFNAME`` and whose host end is a port of a bridge
that holds the gateway address.

Parts, one reason to change each: :mod:`.base` (the settings, the host
end's name, netlink errors as CNI errors), :mod:`.bridge` (ADD's plumb,
DEL's unplumb and the bridge), :mod:`.check` (CHECK), :mod:`.hostends`
(GC's listing and removal of leaked host ends) and :mod:`.plumbing` (ADD's
netlink errors and rollback, shared with the OVS binding). :class:`BridgeBinding`
joins them; callers use this package's names only, and
:func:`from_conf` picks the configured one.
"""
from __future__ import annotations

from oslo_config import cfg

from kuryr_supervisor.cni import ovsdb
from kuryr_supervisor.cni.binding.base import HOST_PREFIX
from kuryr_supervisor.cni.binding.bridge import (
    BRIDGE_RECHECK,
    BridgeBinding,
    PlumbResult,
)
from kuryr_supervisor.cni.binding.ovs import OvsBinding
from kuryr_supervisor.cni.binding.ovsports import MARK

__all__ = ["BRIDGE_RECHECK", "HOST_PREFIX", "MARK", "BridgeBinding",
           "OvsBinding", "PlumbResult", "from_conf", "ovsdb_from_conf"]


def ovsdb_from_conf(conf: cfg.ConfigOpts) -> ovsdb.Ovsdb:
    """The OVSDB adapter as configured ([binding] ovsdb_*)."""
    return ovsdb.Ovsdb(conf.binding.ovsdb_connection,
                       conf.binding.ovsdb_timeout,
                       bridge=conf.binding.ovs_bridge)


def from_conf(conf: cfg.ConfigOpts) -> BridgeBinding | OvsBinding:
    """The binding ``[binding] driver`` names."""
    group = conf.binding
    if group.driver == "ovs":
        return OvsBinding(group.ovs_bridge, group.mtu,
                          ovsdb=ovsdb_from_conf(conf),
                          tx_checksum_off=group.ovs_tx_checksum_off,
                          ovn_rundir=group.ovn_rundir)
    return BridgeBinding(group.bridge, group.mtu)
