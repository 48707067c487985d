"""The nodes' canary ports in Neutron: one per node, made as for a pod.

A family of per-node ports (:mod:`.pernode`: how they are made, found,
tagged and reclaimed): on the pod network and subnet, with the pods'
security groups (none named: the project's default, as the pods'
ports), tagged with the cluster tag and :data:`CANARY_TAG`, under a
``device_owner`` of its own
(:data:`~kuryr_supervisor.controller.openstack.adapter.CANARY_OWNER`) so
that the port handler's lookups and sweeps never see it. Its
``device_id`` names the node (:func:`device_id`).
"""
from __future__ import annotations

from collections.abc import Callable

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.netcheck.judge import pernode
from kuryr_supervisor.netcheck.judge.pernode import Family, PerNodePorts

#: Tag of every canary port, beside the cluster tag.
CANARY_TAG = "kuryr-supervisor-canary"
CANARY = Family(what="canary port", tag=CANARY_TAG, owner=osa.CANARY_OWNER,
                prefix="kuryr-canary:", kind="canary")


def device_id(node: str) -> str:
    """The canary port's ``device_id`` for ``node``."""
    return pernode.device_id(CANARY, node)


class CanaryPorts(PerNodePorts):
    """The canaries' family (see the module); ``beat`` is the handler's
    heartbeat."""

    def __init__(self, cloud: osa.OpenStack, client: k8s.K8sClient, *,
                 network_id: str, subnet_id: str, project_id: str = "",
                 cluster_id: str = "",
                 beat: Callable[[], None] = lambda: None) -> None:
        super().__init__(cloud, client, CANARY, network_id=network_id,
                         subnet_id=subnet_id, project_id=project_id,
                         cluster_id=cluster_id, beat=beat)

    canary = PerNodePorts.assigned
