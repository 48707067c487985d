"""What the port handler knows of its pods, in one record.

The handler (:mod:`.handler`) and its provisioning step (:mod:`.provision`)
read and change these together; both run in the handler's one thread, so
the record needs no lock. Per pod it keeps the UID, namespace, name and
port id (one tuple), the UID in a set once its PodPort is written, what
that PodPort names (every PodPort read, a pod the list lacked included:
its port is no one's to delete or make again until a consistent read says
the pod is gone), and its node (where its port is bound, made again too).
A finished pod (:mod:`.finished`) stays in the record, needing no port,
until it is deleted: it exists, so its ports are never a gone pod's.
"""
from __future__ import annotations

import dataclasses

from kuryr_supervisor.controller.openstack import wire
from kuryr_supervisor.controller.ports.podports import Named


@dataclasses.dataclass
class PodBook:
    """The handler's pods (see the module)."""

    #: uid -> (namespace, name, port id or "") of every live pod
    pods: dict[str, tuple[str, str, str]] = dataclasses.field(
        default_factory=dict)
    #: uids whose PodPort is written
    written: set[str] = dataclasses.field(default_factory=set)
    #: uid -> what its written PodPort names (kept; immutable once bound)
    named: dict[str, Named] = dataclasses.field(default_factory=dict)
    #: uids of the pods in a terminal phase (Succeeded, Failed): they need
    #: no port, ever again (see :mod:`.finished`)
    finished: set[str] = dataclasses.field(default_factory=set)
    #: uid -> node of every pod that needs a port (binding:host_id)
    nodes: dict[str, str] = dataclasses.field(default_factory=dict)
    #: uid -> until when (the pace's clock) a create whose answer was
    #: lost may still commit
    inflight: dict[str, float] = dataclasses.field(default_factory=dict)
    #: Neutron may hold ports the handler does not know of (a lost answer,
    #: or not listed yet): list before creating.
    uncertain: bool = True

    def port_name(self, uid: str, tag: str) -> str:
        """The Neutron port name of pod ``uid``'s port: the cluster's
        ``tag``, the pod's namespace and name."""
        ns, name, _ = self.pods[uid]
        return wire.port_name(tag, f"{ns}/{name}")

    def holds(self, uid: str, port_id: str) -> None:
        """Pod ``uid`` holds port ``port_id`` from now on."""
        ns, name, _ = self.pods[uid]
        self.pods[uid] = (ns, name, port_id)
