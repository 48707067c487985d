"""What every part of the bridge binding shares: its settings, the host
end's name, its deletion and the translation of netlink failures into CNI
errors.

Invariant: the host end's name is a pure function of (container id,
ifname), so DEL and GC find it without any state, and every host end the
binding creates shares one prefix (:data:`HOST_PREFIX`).
"""
from __future__ import annotations

import errno
import hashlib
from types import ModuleType
from typing import Any

from kuryr_supervisor import errors
from kuryr_supervisor.cni import netlink as _netlink

HOST_PREFIX = "ksv"
"""Every host veth end starts with this (then 12 hex digits)."""
HASH_LEN = 12
"""Hex digits after :data:`HOST_PREFIX` in a host end's name."""
CANARY = ("kuryr-supervisor-canary", "eth0")
"""(container id, ifname) the node's canary is plugged under: its host end
is ours but no pod's, and GC spares it."""


def _digest(container_id: str, ifname: str) -> str:
    key = f"{container_id}/{ifname}".encode()
    return hashlib.sha256(key).hexdigest()[:HASH_LEN]


def plumbing_error(what: str, exc: _netlink.NetlinkError) -> errors.CNIError:
    """Netlink failures by cause: the pod's namespace gone (the caller's),
    the bridge name taken or no CAP_NET_ADMIN (the node's: not counted,
    readiness names them), anything else (ours: counted)."""
    if isinstance(exc, _netlink.NetnsNotFound):
        return errors.ContainerUnknown(str(exc), f"errno={exc.errno}")
    if isinstance(exc, _netlink.WrongLinkKind):
        return errors.BridgeConflict(f"[binding] bridge: {exc}",
                                     f"errno={exc.errno}")
    if exc.errno == errno.EPERM:
        return errors.NoNetAdmin(f"{what}: {exc} (CAP_NET_ADMIN missing?)",
                                 f"errno={exc.errno}")
    return errors.PlumbingError(f"{what}: {exc}", f"errno={exc.errno}")


class BindingBase:
    """The settings each part of the binding reads; stateless otherwise.

    ``netlink_module`` is :mod:`kuryr_supervisor.cni.netlink` in production;
    tests inject a wrapper that fails on cue.
    """

    def __init__(self, bridge: str = "kuryr0", mtu: int = 1500, *,
                 netlink_module: ModuleType | Any = _netlink) -> None:
        self.bridge = bridge
        self.mtu = mtu
        self._nl = netlink_module

    @staticmethod
    def host_ifname(container_id: str, ifname: str) -> str:
        """Deterministic host end name: ``ksv`` + 12 hex digits (15 chars)."""
        return HOST_PREFIX + _digest(container_id, ifname)

    def _delete_host_end(self, host: str, what: str) -> bool:
        """Delete the host end ``host`` (its peer goes with it): DEL's and
        GC's removal. Whether it was there; a netlink failure is the CNI
        error :func:`plumbing_error` makes of it, ``what`` naming the call."""
        try:
            with self._nl.rtnl() as nl:
                return bool(self._nl.remove_link(nl, host))
        except _netlink.NetlinkError as exc:
            raise plumbing_error(what, exc) from exc
