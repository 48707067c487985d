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
class Allocation:
    """One address handed to one (container, ifname)."""

    container_id: str
    ifname: str
    address: ipaddress.IPv4Interface
    gateway: ipaddress.IPv4Address
    netns: str
    pod: PodRef
    created: float
    mac: str | None = None   # the pod's MAC when the address source fixes it
