"""The Neutron calls of the port pools: make pool ports, claim one for a
pod, give one back.

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

These calls run in the pools' own threads (the refill thread, the claim
threads), straight over the adapter's transport: each request is bounded
by the session's timeout, scaled for a bulk create by its size, and none
queues behind the handler's own calls on the adapter's call path.
"""
from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack.wire import _port

#: ``device_id`` of a port waiting in a pool.
POOL_DEVICE = "kuryr-supervisor-pool"
#: Tag of every port made for a pool.
POOL_TAG = "kuryr-supervisor-pool"
#: Seconds of request timeout granted per port of a bulk create (a real
#: Neutron takes 0.1-0.2 s a port idle, above 1 s on a busy machine).
SECONDS_PER_PORT = 1.5


def _sized(cloud: osa.OpenStack, ports: int) -> osa.OpenStack:
    """The adapter with a request timeout long enough for ``ports``."""
    clone = copy.copy(cloud)
    clone.timeout = max(cloud.timeout, SECONDS_PER_PORT * ports)
    return clone


def create(cloud: osa.OpenStack, *, network_id: str, subnet_id: str,
           tag: str, count: int, host: str = "") -> list[osa.Port]:
    """``count`` pool ports in one bulk create (all or nothing), bound to
    node ``host`` when given."""
    tags = [t for t in (tag, POOL_TAG) if t]
    body = [cloud._port_body(network_id, subnet_id, "kuryr-pool",
                             POOL_DEVICE, tags, host) for _ in range(count)]
    data = _sized(cloud, count)._call("POST", "/v2.0/ports", ok=(201,),
                                      json={"ports": body})
    items = data.get("ports") if data else None
    if not isinstance(items, list) or len(items) != count:
        raise osa.OpenStackUnavailable(f"Neutron POST /v2.0/ports (pool bulk "
                                       f"of {count}): not one port per request")
    return [_port(p) for p in items]


def claim(cloud: osa.OpenStack, port_id: str, *, device_id: str, name: str,
          host: str = "") -> osa.Port:
    """Give pool port ``port_id`` to pod ``device_id`` (one PUT)."""
    body: dict[str, Any] = {"device_id": device_id, "name": name}
    if host:
        body["binding:host_id"] = host
    data = cloud._call("PUT", f"/v2.0/ports/{port_id}", json={"port": body})
    if not data or not isinstance(data.get("port"), dict):
        raise osa.OpenStackUnavailable(f"Neutron PUT port {port_id}: no port")
    port = _port(data["port"])
    if port.device_id != device_id:
        raise osa.OpenStackUnavailable(f"Neutron PUT port {port_id}: the "
                                       f"update was not applied")
    return port


def binding_refused(exc: Exception) -> bool:
    """Neutron's policy refused ``binding:host_id`` (403)."""
    return isinstance(exc, osa.OpenStackRefused) and exc.status == 403 \
        and "binding:host_id" in str(exc)


def give_back(cloud: osa.OpenStack, port_ids: Sequence[str]) -> int:
    """Delete pool ports; how many were still there."""
    gone = 0
    for port_id in port_ids:
        try:
            cloud._call("DELETE", f"/v2.0/ports/{port_id}", ok=(204,))
            gone += 1
        except osa.OpenStackRefused as exc:
            if exc.status != 404:
                raise
    return gone
