"""One Service's load balancer brought to what the Service asks: a job,
run in one of the handler's workers.

A job plans (:mod:`.plan`), carries out the plan's first write, waits for
the load balancer to settle (its status tree polled at short intervals,
0.1 s growing to 1 s: the OVN provider settles in about a second; to
0.3 s after a pool's members, which the next pool's write waits for and
which take the provider a request or two; reads no write waits for,
after a create of many requests, would only load the Octavia API
process, which runs the provider too), reads
it again and plans anew from what the Service asks then, until nothing
differs; so one load balancer never has two writes in flight, and what
is written is always the whole current difference (endpoints that
changed twice while the load balancer was busy are one batch). A 409 (the load balancer busy: another write, ours
from before a restart, someone's) is met the same way: wait, read, plan.
After a batch replace of members the pool's members are what was sent
(Octavia reports a deleted member last, a second after the rest settled:
a tree read then would show it still).

A pool's members are one write: the batch, or the one member added or
deleted alone when that is the pool's one difference (:mod:`.members`).

Idempotent creates: before a create, the load balancers holding the VIP
are looked up (the VIP is unique on the service subnet; a create that
answered nothing, or a leader that lost its lease mid-create, may have
made one): ours for this Service is adopted, ours for a Service that is
gone waits for its deletion (:class:`VipHeld`), anyone else's is a
refusal (:class:`~kuryr_supervisor.controller.openstack.lbwire.VipInUse`).

Calls are the caller's-thread ones (``Direct``: the request timeout
bounds each); the handler's loop, which waits for its workers, beats.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from kuryr_supervisor.controller.openstack import lbwire
from kuryr_supervisor.controller.openstack.lbwire import Member
from kuryr_supervisor.controller.openstack.octavia import (
    ListenerSpec,
    OctaviaApi,
)
from kuryr_supervisor.controller.openstack.wire import OpenStackError
from kuryr_supervisor.controller.services import plan as planning
from kuryr_supervisor.controller.services.desired import Listener, Wanted
from kuryr_supervisor.controller.services.inventory import Naming, assemble
from kuryr_supervisor.controller.services.jobs import (
    Job,
    Leave,
    Outcome,
    StillFailing,
    VipHeld,
)
from kuryr_supervisor.controller.services.members import MemberWrites
from kuryr_supervisor.controller.services.plan import Actual

LOG = logging.getLogger(__name__)

#: Writes one job makes at most (a whole remake is a delete, a create and
#: a few listener or pool changes).
MAX_WRITES = 12
#: Polls of a settling load balancer: the first after this, growing.
FIRST_POLL, POLL_GROWTH, LAST_POLL = 0.1, 1.5, 1.0
#: The last poll's interval after a pool's members were written.
LAST_MEMBERS_POLL = 0.3


class Worker:
    """Runs jobs (see the module): ``api`` the calls, ``naming`` the
    cluster's tags and names, ``subnet_of`` a member's subnet, ``alive``
    whether a Service UID is known to the handler."""

    def __init__(self, api: OctaviaApi, *, naming: Callable[[], Naming],
                 subnet_of: Callable[[str], str], vip_subnet_id: str,
                 provider: str, settle_timeout: Callable[[], float],
                 alive: Callable[[str], bool], stopping: threading.Event,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api, self.naming, self.subnet_of = api, naming, subnet_of
        self.vip_subnet_id, self.provider = vip_subnet_id, provider
        self.settle_timeout, self.alive = settle_timeout, alive
        self.stopping, self.clock = stopping, clock

    def run(self, job: Job) -> Outcome:
        return Run(self, job).outcome()


class Run:
    """One job's run (see the module): what it has seen and done so far."""

    def __init__(self, worker: Worker, job: Job) -> None:
        self.w, self.job, self.api = worker, job, worker.api
        self.actual = job.actual
        self.done, self.complete, self.stuck = False, job.complete, False
        self.ids: dict[str, frozenset[str]] | None = None
        self.members = MemberWrites(self.api, worker.subnet_of)
        self.writes: list[str] = []
        self.created = self.errored = ""

    def outcome(self) -> Outcome:
        error: Exception | None = None
        try:
            self._run()
        except OpenStackError as exc:
            error = exc
            if self.writes:
                # What the last write made is unread (its answer or the
                # read after it lost): the next job reads it first, not
                # write it again from what was there before.
                self.complete = False
        return Outcome(self.job.uid, self.actual, self.done, self.complete,
                       self.ids, tuple(self.writes), self.created,
                       self.errored, self.stuck, error)

    def _run(self) -> None:
        actual = self.actual
        if actual is not None and not self.complete:
            actual = self._members_of(actual)
        while len(self.writes) < MAX_WRITES and not self.w.stopping.is_set():
            self.actual = actual
            wanted = self.job.want()
            if isinstance(wanted, Leave):
                self.done = True
                return
            plan = planning.plan(wanted, actual)
            if plan.done:
                self.done = True
                return
            if plan.wait:
                assert actual is not None       # a pending one: there
                actual = self._read(actual.id, actual.vip)
                if self.stuck:
                    return
                continue
            step = plan.steps[0]
            if isinstance(step, planning.Delete) and self.errored and \
                    actual is not None and actual.status == "ERROR":
                raise StillFailing(f"load balancer {actual.id} went ERROR "
                                   f"again once made again")
            try:
                actual = self._do(step, actual)
            except lbwire.LoadBalancerBusy:
                if actual is None:
                    raise
                actual = self._read(actual.id, actual.vip)
            if self.stuck:
                return
        self.actual = actual

    # -- one write ---------------------------------------------------------------
    def _do(self, step: planning.Step, actual: Actual | None) -> Actual | None:
        api, tags = self.api, list(self.w.naming().tags)
        if isinstance(step, planning.Create):
            return self._create(step.wanted)
        assert actual is not None
        if isinstance(step, planning.Delete):
            if actual.status == "ERROR":
                self.errored = actual.id
            LOG.info("Service %s: deleting load balancer %s (%s)",
                     self.job.uid, actual.id, step.why)
            self.writes.append("delete")
            api.delete_load_balancer(actual.id)
            tree = self._settled(actual.id, gone=True)
            return None if tree is None else dataclasses.replace(
                actual, status=tree.status)
        if isinstance(step, planning.DeleteListener):
            self.writes.append("listener")
            api.delete_listener(step.listener_id)
        elif isinstance(step, planning.DeletePool):
            self.writes.append("pool")
            api.delete_pool(step.pool_id)
        elif isinstance(step, planning.AddListener):
            self.writes.append("listener")
            api.create_listener(actual.id, self._spec(
                step.listener, step.algorithm), tags)
        elif isinstance(step, planning.AddPool):
            self.writes.append("pool")
            api.create_pool(step.listener_id, self._spec(
                step.listener, step.algorithm), tags)
        elif isinstance(step, planning.SetMembers):
            self.writes.append("members")
            self.members.write(actual.id, step.pool_id, _members(
                actual, step.pool_id), step.listener, tags)
            if self.ids is not None:    # its ids: those the next list says
                self.ids.pop(step.pool_id, None)
            self._settled(actual.id, last=LAST_MEMBERS_POLL)
            # As sent (see the module): the tree would still show a member
            # just deleted.
            return _with_members(actual, step.pool_id, step.listener)
        return self._read(actual.id, actual.vip)

    def _create(self, wanted: Wanted) -> Actual | None:
        naming, uid = self.w.naming(), self.job.uid
        for lb in self.api.load_balancers(vip_address=wanted.vip):
            owner = naming.uid_of(lb)
            if owner == uid:
                LOG.info("Service %s/%s: load balancer %s found by its VIP "
                         "%s, adopted", wanted.namespace, wanted.name, lb.id,
                         wanted.vip)
                return self._read(lb.id, lb.vip)
            if owner and not self.w.alive(owner):
                raise VipHeld(f"VIP {wanted.vip} is still held by load "
                              f"balancer {lb.id} of Service {owner}, which "
                              "is gone: it is deleted first")
            raise lbwire.VipInUse(
                f"VIP {wanted.vip} is held by load balancer {lb.id} "
                f"({lb.name or 'unnamed'}), not this Service's", 409)
        self.writes.append("create")
        lb = self.api.create_load_balancer(
            name=naming.name(uid),
            description=f"{wanted.namespace}/{wanted.name}",
            vip_address=wanted.vip, vip_subnet_id=self.w.vip_subnet_id,
            tags=list(naming.tags), provider=self.w.provider,
            listeners=[self._spec(li, wanted.algorithm)
                       for li in wanted.listeners])
        self.created = lb.id
        return self._read(lb.id, lb.vip or wanted.vip)

    def _spec(self, listener: Listener, algorithm: str) -> ListenerSpec:
        return ListenerSpec(listener.protocol, listener.port, algorithm,
                            self.members.specs(listener))

    # -- waiting and reading ---------------------------------------------------------
    def _settled(self, lb_id: str, *, gone: bool = False,
                 last: float = LAST_POLL) -> lbwire.Tree | None:
        """Poll the status tree until nothing in it is pending (``gone``:
        until there is none, or it is in ERROR), at most the settle
        timeout (then :attr:`stuck`)."""
        w = self.w
        end = w.clock() + w.settle_timeout()
        wait = FIRST_POLL
        while not w.stopping.wait(wait):
            tree = self.api.tree(lb_id)
            if tree is None or tree.settled and (
                    not gone or tree.status == "ERROR"):
                return tree
            if w.clock() >= end:
                LOG.warning("load balancer %s still %s after %.0f s: left "
                            "for the next reconciliation", lb_id,
                            tree.status, w.settle_timeout())
                self.stuck, self.complete = True, False
                return tree
            wait = min(last, wait * POLL_GROWTH)
        self.stuck, self.complete = True, False     # stopping
        return None

    def _members_of(self, actual: Actual) -> Actual | None:
        """``actual`` (from the lists) with its pools' members, from its
        status tree alone while that holds the same pools; else read
        whole."""
        tree = self.api.tree(actual.id)
        if tree is None:
            return None
        pools = {li.pool.id for li in actual.listeners if li.pool is not None}
        if not tree.settled or not pools <= set(tree.members) or \
                tree.status != actual.status:
            return self._read(actual.id, actual.vip)
        self.ids, self.complete = dict(tree.member_ids), True
        self.members.saw(tree)
        return dataclasses.replace(actual, listeners=tuple(
            dataclasses.replace(li, pool=dataclasses.replace(
                li.pool, members=tree.members[li.pool.id]))
            if li.pool is not None else li for li in actual.listeners))

    def _read(self, lb_id: str, vip: str) -> Actual | None:
        """The load balancer as it is once settled (None: gone)."""
        tree = self.api.tree(lb_id)
        if tree is not None and not tree.settled:
            tree = self._settled(lb_id)
        if tree is None:
            return None
        api = self.api
        actual = assemble(lb_id, vip, tree.status,
                          api.listeners(lb_id=lb_id), api.pools(lb_id=lb_id),
                          tree.members)
        self.ids, self.complete = dict(tree.member_ids), True
        self.members.saw(tree)
        return actual


def _members(actual: Actual, pool_id: str) -> frozenset[Member]:
    """The members of ``actual``'s pool ``pool_id``."""
    return next((li.pool.members for li in actual.listeners
                 if li.pool is not None and li.pool.id == pool_id),
                frozenset[Member]())


def _with_members(actual: Actual, pool_id: str, listener: Listener) -> Actual:
    """``actual`` with pool ``pool_id``'s members those of ``listener``."""
    return dataclasses.replace(actual, listeners=tuple(
        dataclasses.replace(li, pool=dataclasses.replace(
            li.pool, members=listener.members))
        if li.pool is not None and li.pool.id == pool_id else li
        for li in actual.listeners))
