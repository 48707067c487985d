"""Bridge binding: a pod's veth, its address and route, on a Linux bridge.

The same shape as the reference ``bridge`` CNI plugin, done with
:mod:`kuryr_supervisor.cni.netlink` (which imports pyroute2 only when CHECK
or GC first needs it): a veth pair whose pod end lives in the pod's
namespace under ``CNI_IFNAME`` and whose host end is a port of a bridge
that holds the gateway address.

Parts, one reason to change each: :mod:`.base` (the settings, the host
end's name, netlink errors as CNI errors), :mod:`.bridge` (ADD's plumb,
DEL's unplumb and the bridge), :mod:`.check` (CHECK) and :mod:`.hostends`
(GC's listing and removal of leaked host ends). :class:`BridgeBinding`
joins them; callers use this package's names only.
"""
from __future__ import annotations

from kuryr_supervisor.cni.binding.base import HOST_PREFIX
from kuryr_supervisor.cni.binding.bridge import (
    BRIDGE_RECHECK,
    BridgeBinding,
    PlumbResult,
)

__all__ = ["BRIDGE_RECHECK", "HOST_PREFIX", "BridgeBinding", "PlumbResult"]
