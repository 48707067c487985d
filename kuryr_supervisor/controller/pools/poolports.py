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
claim threads; :func:`claim_all`'s, for the claims of pods a
NetworkPolicy selects, which the port handler waits for: their groups
are set in the claim's PUT before their PodPorts), each within its own
timeout
(:meth:`~kuryr_supervisor.controller.openstack.neutron.NeutronApi.within`),
so none queues behind the handler's own calls on the adapter's call path.
A pool create and a claim go through the one path every port is made or
re-bound by (:mod:`~kuryr_supervisor.controller.openstack.making`: the
binding, the tags, each checked; tagged after the create where Neutron
drops a create's tags), a create's timeout sized by the same
:class:`~kuryr_supervisor.controller.openstack.pace.Pace` as the pods'.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Callable, Sequence

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
#: ... and a closed pool port's (made in no security group).
CLOSED_NAME = "pool-closed"


def tags_of(tag: str) -> list[str]:
    """A pool port's tags: the cluster's and the pools'."""
    return [t for t in (tag, POOL_TAG) if t]


def closed(port: osa.Port, tag: str) -> bool:
    """Whether pool port ``port`` is a closed one (made in no security
    group, for the pods a NetworkPolicy selects): its name says so."""
    return port.name == port_name(tag, CLOSED_NAME)


def create(maker: PortMaker, pace: Pace, *, tag: str, count: int,
           host: str = "", closed: bool = False) -> list[osa.Port]:
    """``count`` pool ports in one bulk create (all or nothing), bound to
    node ``host`` when given, within ``pace``'s timeout for that size;
    ``closed``: in no security group (else the project's default)."""
    want = Want(port_name(tag, CLOSED_NAME if closed else POOL_NAME),
                POOL_DEVICE, host=host, groups=() if closed else None)
    return maker.make([want] * count, tags=tags_of(tag),
                      timeout=pace.timeout_for(count), bulk=True)


@dataclasses.dataclass(frozen=True)
class Claim:
    """A pool port to give pod ``uid`` under ``name``, bound to ``host``,
    in ``groups`` (None: as it is)."""

    port: osa.Port
    uid: str
    name: str
    host: str = ""
    groups: tuple[str, ...] | None = None


def claim(maker: PortMaker, port: osa.Port, *, device_id: str, name: str,
          host: str = "", groups: Sequence[str] | None = None) -> osa.Port:
    """Give pool port ``port`` to pod ``device_id`` (one PUT), bound to
    node ``host`` if it is not yet, its tags kept whole; ``groups``: its
    security groups, set in that same PUT (None: left as they are, the
    project's default group a pool port is made with)."""
    return maker.claim(port, device_id=device_id, name=name, host=host,
                       tags=port.tags, timeout=maker.cloud.timeout,
                       groups=groups)


def claim_all(maker: PortMaker, claims: Sequence[Claim], *, workers: int,
              beat: Callable[[], None] = lambda: None,
              on_done: Callable[[dict[str, osa.Port | Exception]], None]
              = lambda done: None) -> dict[str, osa.Port | Exception]:
    """:func:`claim` for each of ``claims``, ``workers`` at once, in the
    caller's time (a claim whose pod must not have its PodPort before
    its port is updated); pod UID -> its port updated, or why not.
    ``on_done`` is told, in the caller's thread, the claims answered
    since it was last told (one at first, more while it ran): a pod's
    PodPort need not wait for the other pods' claims."""
    out: dict[str, osa.Port | Exception] = {}
    if not claims:
        return out
    with concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, min(workers, len(claims))),
            thread_name_prefix="pool-claim-now") as pool:
        uids = {pool.submit(
            claim, maker, c.port, device_id=c.uid, name=c.name, host=c.host,
            groups=c.groups): c.uid for c in claims}
        pending = set(uids)
        while pending:
            done, pending = concurrent.futures.wait(
                pending, timeout=1.0,
                return_when=concurrent.futures.FIRST_COMPLETED)
            beat()
            answered: dict[str, osa.Port | Exception] = {}
            for future in done:
                try:
                    answered[uids[future]] = future.result()
                except Exception as exc:  # noqa: BLE001 - the caller's
                    answered[uids[future]] = exc
            if answered:
                out.update(answered)
                on_done(answered)
    return out


def give_back(cloud: osa.OpenStack, port_ids: Sequence[str]) -> int:
    """Delete pool ports; how many were still there."""
    direct = cloud.within(cloud.timeout)
    return sum(direct.delete_port(port_id) for port_id in port_ids)
