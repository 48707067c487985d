"""The port pools' records: a pool's key, a pool, what serving pods gave.

Kept apart from :mod:`.portpools` (which pools exist, who takes what) so
the refill and the figures speak of keys and pools without the handler.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Protocol

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack import wire


class Pod(Protocol):
    """What the pools read of a pod the handler keeps (its record)."""

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def node(self) -> str: ...      # its port's node ("": needs none)

    @property
    def finished(self) -> bool: ...


#: uid -> the pod, as the handler keeps its pods
Pods = Mapping[str, Pod]


@dataclasses.dataclass(frozen=True)
class PoolKey:
    """What a pool port is made for, as Kuryr keys pools; ``node`` is the
    node its ports are bound to ("": unbound); ``closed``: its ports are
    made in no security group (admitting nothing until claimed), for the
    pods a NetworkPolicy selects, else in the project's default group."""

    network_id: str
    subnet_id: str = ""
    project_id: str = ""
    security_groups: tuple[str, ...] = ()
    node: str = ""
    closed: bool = False

    @property
    def label(self) -> str:
        parts = [self.network_id, self.subnet_id or "-",
                 self.project_id or "-"]
        if self.security_groups:
            parts.append(",".join(self.security_groups))
        if self.closed:
            parts.append("closed")
        return "/".join(parts) + (f"@{self.node}" if self.node else "")


@dataclasses.dataclass
class Pool:
    """One key's free ports (id -> port) and figures."""

    free: dict[str, osa.Port] = dataclasses.field(default_factory=dict)
    creating: int = 0
    hits: int = 0
    misses: int = 0
    given_back: int = 0


@dataclasses.dataclass
class Served:
    """What :meth:`~.portpools.PortPools.serve` gave: the pods that took
    a pool port (``taken``), those left to be created (``rest``), and the
    pods of ``taken`` whose claim the caller makes itself before their
    PodPorts (``own``: a pod a NetworkPolicy selects that took a port in
    the default group; one that took a closed port is claimed in the
    background, its groups in that claim)."""

    taken: list[tuple[str, osa.Port]] = dataclasses.field(default_factory=list)
    rest: list[str] = dataclasses.field(default_factory=list)
    own: set[str] = dataclasses.field(default_factory=set)


def port_name(pods: Pods, uid: str, tag: str) -> str:
    """The port's name once a pod holds it, as a created port's: the
    cluster's ``tag``, then the pod's namespace and name."""
    pod = pods.get(uid)
    ns, name = (pod.namespace, pod.name) if pod is not None else ("", uid)
    return wire.port_name(tag, f"{ns}/{name}")
