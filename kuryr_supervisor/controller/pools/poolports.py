"""What a pool port is, and the pools' Neutron calls: make pool ports,
claim one for a pod, give one back.

A pool port is one of the controller's ports (``device_owner``
DEVICE_OWNER, the cluster tag, the pod network, the project) that no pod
has yet: its ``device_id`` is :data:`POOL_DEVICE` and it also carries the
tag :data:`POOL_TAG`; it is made bound to the node whose pool it fills
(``binding:host_id``) unless Neutron's policy refuses that. The resync
lists it with the controller's other ports, and the pools, not the sweep,
own it. A pod claims it with one ``PUT`` setting ``device_id`` to the
pod's UID, its name and, when the port is not bound to the pod's node
yet, ``binding:host_id``: from then on it is that pod's port like any
other (the tag stays, saying where it came from).

Every call is one of the adapter's public calls, made in the pools' own
threads (the refill thread, the claim threads) through
:meth:`~kuryr_supervisor.controller.openstack.neutron.NeutronApi.within`,
so none queues behind the handler's own calls on the adapter's call path.
A pool create is the pods' create (the same tag check: a Neutron that
drops the tags of a bulk create is named, and its ports deleted, not
leaked), its timeout sized by the same
:class:`~kuryr_supervisor.controller.openstack.pace.Pace`.
"""
from __future__ import annotations

from collections.abc import Sequence

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack.pace import Pace

#: ``device_id`` of a port waiting in a pool.
POOL_DEVICE = "kuryr-supervisor-pool"
#: Tag of every port made for a pool.
POOL_TAG = "kuryr-supervisor-pool"
#: The name of a port waiting in a pool.
POOL_NAME = "kuryr-pool"


def create(cloud: osa.OpenStack, pace: Pace, *, network_id: str,
           subnet_id: str, tag: str, count: int,
           host: str = "") -> list[osa.Port]:
    """``count`` pool ports in one bulk create (all or nothing), bound to
    node ``host`` when given, within ``pace``'s timeout for that size."""
    return cloud.within(pace.timeout_for(count)).create_ports(
        network_id=network_id, subnet_id=subnet_id,
        devices=[(POOL_NAME, POOL_DEVICE)] * count,
        tags=[t for t in (tag, POOL_TAG) if t],
        hosts={POOL_DEVICE: host} if host else None)


def claim(cloud: osa.OpenStack, port_id: str, *, device_id: str, name: str,
          host: str = "") -> osa.Port:
    """Give pool port ``port_id`` to pod ``device_id`` (one PUT)."""
    return cloud.within(cloud.timeout).update_port(
        port_id, device_id=device_id, name=name, host=host)


def give_back(cloud: osa.OpenStack, port_ids: Sequence[str]) -> int:
    """Delete pool ports; how many were still there."""
    direct = cloud.within(cloud.timeout)
    return sum(direct.delete_port(port_id) for port_id in port_ids)
