"""What to do about one Service's load balancer: the wanted state
(:mod:`.desired`) against what Octavia has, as the writes that make one
the other.

Pure: a :class:`~.desired.Wanted` (or nothing: the Service is gone, or
makes none) and an :class:`Actual` (or nothing) in, a :class:`Plan` out.
Octavia answers 409 to any write on a load balancer not settled (each
write leaves it ``PENDING_UPDATE`` for a moment), so only a plan's first
step is carried out; then, once the load balancer settled, a plan is made
again from what Octavia has then: the whole current difference, never a
queue of calls (:mod:`.work`). Each step is one write:

* nothing there: one create of the whole tree (load balancer, listeners,
  default pools, members);
* a load balancer whose VIP is not the Service's, or in ``ERROR``: deleted
  (cascade), then made again;
* one pending: nothing now (:attr:`Plan.wait`);
* listeners by (protocol, port): those not wanted deleted, then a pool
  left without a listener; a pool whose algorithm differs is deleted and
  made again for its listener (the OVN provider accepts a change of
  algorithm and never applies it); a missing listener is created with its
  pool and members;
* members: one batch replace per pool whose members differ (Octavia
  matches them by address and port), never a call per member;
* a Service gone (or that makes nothing any more): its load balancer
  deleted, cascade.

A load balancer already as wanted makes no write at all: a restart or a
handover writes nothing.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from kuryr_supervisor.controller.openstack.lbwire import PENDING, Member
from kuryr_supervisor.controller.services.desired import Listener, Wanted

ACTIVE, ERROR = "ACTIVE", "ERROR"


@dataclasses.dataclass(frozen=True)
class ActualPool:
    id: str
    algorithm: str
    members: frozenset[Member]


@dataclasses.dataclass(frozen=True)
class ActualListener:
    id: str
    protocol: str
    port: int
    pool: ActualPool | None

    @property
    def key(self) -> tuple[str, int]:
        return self.protocol, self.port


@dataclasses.dataclass(frozen=True)
class Actual:
    """A load balancer as Octavia has it."""

    id: str
    vip: str
    status: str                  # provisioning_status
    listeners: tuple[ActualListener, ...] = ()
    #: Pools that are no listener's default pool (a listener deleted).
    orphans: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Create:
    wanted: Wanted


@dataclasses.dataclass(frozen=True)
class Delete:
    lb_id: str
    why: str


@dataclasses.dataclass(frozen=True)
class DeleteListener:
    listener_id: str
    key: tuple[str, int]


@dataclasses.dataclass(frozen=True)
class DeletePool:
    pool_id: str
    why: str


@dataclasses.dataclass(frozen=True)
class AddListener:
    lb_id: str
    listener: Listener
    algorithm: str


@dataclasses.dataclass(frozen=True)
class AddPool:
    listener_id: str
    listener: Listener
    algorithm: str


@dataclasses.dataclass(frozen=True)
class SetMembers:
    pool_id: str
    listener: Listener


Step = (Create | Delete | DeleteListener | DeletePool | AddListener | AddPool
        | SetMembers)


@dataclasses.dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...] = ()
    #: The load balancer is busy (pending): look again later.
    wait: bool = False

    @property
    def done(self) -> bool:
        return not self.steps and not self.wait


def plan(wanted: Wanted | None, actual: Actual | None) -> Plan:
    """The writes that make ``actual`` what ``wanted`` says (see the
    module)."""
    if actual is not None and actual.status in PENDING:
        return Plan(wait=True)
    if wanted is None:
        return Plan((Delete(actual.id, "gone"),)) if actual else Plan()
    if actual is None:
        return Plan((Create(wanted),))
    if actual.status == ERROR:
        return Plan((Delete(actual.id, "in ERROR"), Create(wanted)))
    if actual.vip != wanted.vip:
        return Plan((Delete(actual.id, f"VIP {actual.vip} is not "
                                       f"{wanted.vip}"), Create(wanted)))
    return Plan(_listeners(wanted, actual))


def _listeners(wanted: Wanted, actual: Actual) -> tuple[Step, ...]:
    want: Mapping[tuple[str, int], Listener] = {
        li.key: li for li in wanted.listeners}
    have = {li.key: li for li in actual.listeners}
    steps: list[Step] = [DeleteListener(li.id, key)
                         for key, li in sorted(have.items())
                         if key not in want]
    steps += [DeletePool(p, "no listener") for p in actual.orphans]
    adds: list[Step] = []
    for key, listener in sorted(want.items()):
        there = have.get(key)
        if there is None:
            adds.append(AddListener(actual.id, listener, wanted.algorithm))
        elif there.pool is None:
            adds.append(AddPool(there.id, listener, wanted.algorithm))
        elif there.pool.algorithm != wanted.algorithm:
            steps.append(DeletePool(there.pool.id, f"algorithm "
                                    f"{there.pool.algorithm} is not "
                                    f"{wanted.algorithm}"))
            adds.append(AddPool(there.id, listener, wanted.algorithm))
        elif there.pool.members != listener.members:
            adds.append(SetMembers(there.pool.id, listener))
    return tuple(steps + adds)
