"""What a pool port is, and the pools' Neutron calls: make pool ports,
claim one for a pod, give one back.

A pool port is one of the controller's ports (``device_owner``
DEVICE_OWNER, the cluster tag, the pod network, the project) that no pod
has yet: its ``device_id`` is :data:`POOL_DEVICE`, its name the cluster's
tag and :data:`POOL_NAME`, and it also carries the tag :data:`POOL_TAG`;
it is made bound to the node whose pool it fills (``binding:host_id``)
unless Neutron's policy refuses that. The resync
lists it with the controller's other ports, and the pools, not the sweep,
own it. A pod claims it with one ``PUT`` setting ``device_id`` to the
pod's UID, its name and, when the port is not bound to the pod's node
yet, ``binding:host_id``: from then on it is that pod's port like any
other (the tag stays, saying where it came from).

Every call is made in the pools' own threads (the refill thread, the
claim threads), each within its own timeout
(:meth:`~kuryr_supervisor.controller.openstack.neutron.NeutronApi.within`),
so none queues behind the handler's own calls on the adapter's call path.
A pool create and a claim go through the one path every port is made or
re-bound by (:mod:`~kuryr_supervisor.controller.openstack.making`: the
binding, the tags, each checked; tagged after the create where Neutron
drops a create's tags), a create's timeout sized by the same
:class:`~kuryr_supervisor.controller.openstack.pace.Pace` as the pods'.
"""
from __future__ import annotations

from collections.abc import Sequence

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack.making import PortMaker, Want
from kuryr_supervisor.controller.openstack.pace import Pace
from kuryr_supervisor.controller.openstack.wire import port_name

#: ``device_id`` of a port waiting in a pool.
POOL_DEVICE = "kuryr-supervisor-pool"
#: Tag of every port made for a pool.
POOL_TAG = "kuryr-supervisor-pool"
#: What a pool port's name says after the cluster's tag.
POOL_NAME = "pool"


def tags_of(tag: str) -> list[str]:
    """A pool port's tags: the cluster's and the pools'."""
    return [t for t in (tag, POOL_TAG) if t]


def create(maker: PortMaker, pace: Pace, *, tag: str, count: int,
           host: str = "") -> list[osa.Port]:
    """``count`` pool ports in one bulk create (all or nothing), bound to
    node ``host`` when given, within ``pace``'s timeout for that size."""
    want = Want(port_name(tag, POOL_NAME), POOL_DEVICE, host=host)
    return maker.make([want] * count, tags=tags_of(tag),
                      timeout=pace.timeout_for(count), bulk=True)


def claim(maker: PortMaker, port: osa.Port, *, device_id: str, name: str,
          host: str = "") -> osa.Port:
    """Give pool port ``port`` to pod ``device_id`` (one PUT), bound to
    node ``host`` if it is not yet, its tags kept whole."""
    return maker.claim(port, device_id=device_id, name=name, host=host,
                       tags=port.tags, timeout=maker.cloud.timeout)


def give_back(cloud: osa.OpenStack, port_ids: Sequence[str]) -> int:
    """Delete pool ports; how many were still there."""
    direct = cloud.within(cloud.timeout)
    return sum(direct.delete_port(port_id) for port_id in port_ids)
