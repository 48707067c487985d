"""What an allocation is: the records the IPAM store keeps and hands out.

Plain frozen values, shared by the CNI protocol (the pod named in
``CNI_ARGS``), the service, the binding and the Watcher's reclaim, so none of
them needs the SQLite store to speak of an allocation.
"""
from __future__ import annotations

import dataclasses
import ipaddress


@dataclasses.dataclass(frozen=True)
class PodRef:
    """The pod from CNI_ARGS (K8S_POD_NAMESPACE/NAME/UID; "" when absent)."""

    namespace: str
    name: str
    uid: str


@dataclasses.dataclass(frozen=True)
class Plumbing:
    """What plumbing an attachment made that its ADD result names: enough,
    with the address, to render that result again for a replayed ADD."""

    host_ifname: str
    host_mac: str
    pod_mac: str
    mtu: int


PENDING, PLUMBED = "pending", "plumbed"
"""An allocation's states: reserved by ADD, then plumbed (ADD answered)."""


@dataclasses.dataclass(frozen=True)
class Allocation:
    """One address handed to one (container, ifname).

    ``state`` is PENDING from the allocating transaction until the pod's
    interface is plumbed, then PLUMBED; ``netconf`` (the digest of the
    netconf that made it) and ``plumbing`` are known once PLUMBED (not for
    an attachment an older daemon made, which cannot be replayed).
    """

    container_id: str
    ifname: str
    address: ipaddress.IPv4Interface
    gateway: ipaddress.IPv4Address
    netns: str
    pod: PodRef
    created: float
    mac: str | None = None   # the pod's MAC when the address source fixes it
    #: the pod's Neutron port when the address source names it (not stored:
    #: only ADD, which just looked it up, needs it)
    port_id: str | None = None
    state: str = PLUMBED
    netconf: str | None = None
    plumbing: Plumbing | None = None
