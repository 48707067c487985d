"""The services handler's reconciliation: which Services to look at, a
job per Service in a bounded pool of workers, what their outcomes say.

Run from the handler's loop (:meth:`Reconciler.step`, never blocking but
for a full look): it

1. looks at everything (:meth:`Reconciler.look`): at start, then every
   ``resync_interval``, and after an outage with backoff: the member
   subnets (one Neutron list), the cluster's load balancers (three
   Octavia lists, :mod:`.inventory`), every Service marked to compare;
   a load balancer of a Service the book never had (one deleted while no
   handler ran) is deleted only once a consistent read of the Service
   (named in its description) confirms it gone (the first list may come
   from a lagging watch cache), and only while Octavia's lists proved to
   hold our tagged objects alone; one of a Service the watch saw go, at
   once;
2. plans each Service marked since (a change of it or of its slices,
   :mod:`.book`): one already as wanted costs no call; any other gets a
   job (:mod:`.work`), at most ``octavia_requests`` at once, one per
   Service at a time, deletes of gone Services first;
3. takes the outcomes: what Octavia has now, the Events, the counters; a
   Service whose job failed is tried again with backoff (1 s doubling to
   ``resync_interval``): a load balancer that went ERROR again after it
   was made again, a refusal, an outage. An outage also makes the next
   full look due after the same backoff.

Ready (:attr:`Reconciler.ready`) once the first look is done and every
Service it found has been tried once.
"""
from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable

from oslo_config import cfg

from kuryr_supervisor.controller.openstack.wire import (
    OpenStackError,
    OpenStackUnavailable,
)
from kuryr_supervisor.controller.services import desired
from kuryr_supervisor.controller.services.book import ServiceBook
from kuryr_supervisor.controller.services.inventory import Inventory, Naming
from kuryr_supervisor.controller.services.jobs import LEAVE, Job, Leave, Outcome
from kuryr_supervisor.controller.services.outcomes import Outcomes
from kuryr_supervisor.controller.services.plan import plan
from kuryr_supervisor.controller.services.report import ServiceReport
from kuryr_supervisor.controller.services.subnets import Subnets, placed
from kuryr_supervisor.controller.services.work import Worker
from kuryr_supervisor.kubernetes import client as k8s

LOG = logging.getLogger(__name__)

Clock = Callable[[], float]
#: Seconds the loop waits at most between two looks at the book: what
#: the EndpointSlices' watch (a thread of its own) marked, and the
#: workers' outcomes, wait no longer (a look costs a lock and a few
#: set operations).
GLANCE = 0.1


class Reconciler:
    """See the module; ``naming`` finds the cluster's tags (once),
    ``confirm_gone(uid, described)`` whether a Service is gone."""

    def __init__(self, conf: cfg.ConfigOpts, *, book: ServiceBook,
                 inventory: Inventory, subnets: Subnets, worker: Worker,
                 pool: concurrent.futures.Executor, report: ServiceReport,
                 outcomes: Outcomes, naming: Callable[[], Naming],
                 confirm_gone: Callable[[str, str], bool],
                 clock: Clock) -> None:
        self.opts = conf.services
        self.book, self.inventory, self.subnets = book, inventory, subnets
        self.worker, self.pool, self.report = worker, pool, report
        self.outcomes, self.naming = outcomes, naming
        self.confirm_gone, self.clock = confirm_gone, clock
        self.running: dict[str, concurrent.futures.Future[Outcome]] = {}
        #: Services to look at (the book's marks, gathered)
        self.pending: set[str] = set()
        #: Services without a load balancer to make (headless...)
        self.skipped: set[str] = set()
        self.listed = False
        self.ready = False
        self._next_look = 0.0
        self._failures = 0
        self._first: set[str] | None = None

    # -- the loop's step -------------------------------------------------------
    def step(self) -> None:
        """Outcomes in, a full look when due, jobs out (see the module)."""
        taken = self._harvest()
        for out in taken:
            self.outcomes.took(out, self.pending)
            self._first_done(out.uid)
        if not self.book.synced:
            return
        now = self.clock()
        looked = False
        if not self.running and now >= self._next_look:
            looked = self.look(now)
        if not self.listed:
            return
        marked = self.book.take()
        self.pending |= marked
        self._submit(now)
        if not self.ready and self._first is not None and not self._first:
            self.ready = True
            LOG.info("services: first reconciliation done (%d load "
                     "balancers)", len(self.inventory.found))
        if taken or looked or marked:
            self.outcomes.publish(self.skipped,
                                  len(self.pending) + len(self.running))

    def wake_in(self) -> float:
        """Seconds until :meth:`step` has something to do: at most
        :data:`GLANCE` (a change the slices' thread marked waits no
        longer for the loop)."""
        now = self.clock()
        if self.running or not self.book.synced:
            return GLANCE
        due = [GLANCE, self._next_look - now]
        due += [self.outcomes.not_before(u) - now for u in self.pending]
        return max(0.0, min(due))

    def look(self, now: float) -> bool:
        """The full look (see the module); False if it failed."""
        try:
            naming = self.naming()
            self.subnets.refresh()
            self.inventory.refresh(naming)
        except (OpenStackError, k8s.K8sError) as exc:
            self._failures += 1
            self._next_look = now + self.outcomes.backoff(self._failures)
            self.report.octavia(str(exc))
            return False
        self.report.octavia("")
        self._failures = 0
        self.listed = True
        self._next_look = now + float(self.opts.resync_interval)
        known = self.book.uids()
        for uid in set(self.inventory.found) - known:
            if not self.inventory.proven:
                LOG.warning("Octavia listed objects without the cluster's "
                            "tags: no load balancer is swept until a list "
                            "proves which are ours")
                break
            if self.confirm_gone(uid, self.inventory.described.get(uid, "")):
                self.outcomes.gone.add(uid)
        self.pending |= known | set(self.inventory.found)
        if self._first is None:
            self._first = set(self.pending)
        return True

    def outage(self, now: float) -> None:
        """An outage met by a job: the next full look after backoff."""
        self._failures += 1
        self._next_look = min(self._next_look, now + self.outcomes.backoff(
            self._failures))

    # -- jobs -------------------------------------------------------------------
    def _submit(self, now: float) -> None:
        book = self.book
        # Deletes of gone Services first: their VIPs may be asked again.
        for uid in sorted(self.pending, key=lambda u: (book.get(u) is not None,
                                                       u)):
            if len(self.running) >= int(self.opts.octavia_requests):
                return
            if uid in self.running or self.outcomes.not_before(uid) > now:
                continue
            self.pending.discard(uid)
            job = self._job(uid)
            if job is None:
                self._first_done(uid)
                continue
            self.running[uid] = self.pool.submit(self.worker.run, job)

    def _job(self, uid: str) -> Job | None:
        """What the Service's job is (None: nothing to do)."""
        actual = self.inventory.found.get(uid)
        complete = uid in self.inventory.complete
        wanted = self._wanted(uid, tell=True)
        if actual is None and wanted is None:
            self.book.settled(uid)          # nothing of it to delete
            return None
        if isinstance(wanted, Leave):
            return None
        if (complete or actual is None) and plan(wanted, actual).done:
            return None
        return Job(uid, lambda: self._wanted(uid), actual, complete)

    def _wanted(self, uid: str, *,
                tell: bool = False) -> desired.Wanted | None | Leave:
        """What Service ``uid`` asks now (see :class:`~.work.Job`);
        ``tell``: say what is not provided (the loop's first look)."""
        entry = self.book.get(uid)
        if entry is None:
            if tell:
                self.skipped.discard(uid)
            gone = uid in self.outcomes.gone or self.book.deleted(uid)
            return None if gone else LEAVE
        got = desired.wanted(*entry, sctp=bool(self.opts.sctp))
        if isinstance(got, desired.Skipped):
            if tell:
                self.skipped.add(uid)
                self.outcomes.not_provided(entry[0], [got.why] if got.told
                                           else [])
            return None
        wanted, left_out = placed(got, self.subnets.of)
        if tell:
            self.skipped.discard(uid)
            self.outcomes.not_provided(entry[0], list(got.unprovided))
            self.outcomes.left_out(entry[0], left_out)
        return wanted

    def _harvest(self) -> list[Outcome]:
        out = []
        for uid, future in list(self.running.items()):
            if not future.done():
                continue
            del self.running[uid]
            try:
                got = future.result()
            except Exception as exc:  # noqa: BLE001 - counted, tried again
                LOG.exception("services: the job of Service %s failed", uid)
                got = Outcome(uid, self.inventory.found.get(uid),
                              complete=False, error=exc)
            if isinstance(got.error, OpenStackUnavailable):
                self.outage(self.clock())
            out.append(got)
        return out

    def _first_done(self, uid: str) -> None:
        if self._first is not None:
            self._first.discard(uid)
