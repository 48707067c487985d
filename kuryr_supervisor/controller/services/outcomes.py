"""What the services handler makes of its jobs' outcomes, and of what a
Service asks that is not provided: the inventory updated, the Events and
figures told (:mod:`.report`), a failed Service's backoff.

Backoff per Service: 1 s doubling to ``resync_interval`` while its jobs
fail (an outage, a refusal, a load balancer that went ERROR again once
made again, one that stayed pending), reset by a job that ends as
wanted. A failure that is Octavia's or the cloud's is never the
handler's; only an exception of the handler's own counts against its
failure budget.
"""
from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Iterable

from oslo_config import cfg

from kuryr_supervisor.controller.openstack.lbwire import PENDING
from kuryr_supervisor.controller.openstack.wire import (
    OpenStackError,
    OpenStackRefused,
)
from kuryr_supervisor.controller.runtime import Runtime
from kuryr_supervisor.controller.services.book import ServiceBook
from kuryr_supervisor.controller.services.inventory import Inventory
from kuryr_supervisor.controller.services.jobs import Outcome
from kuryr_supervisor.controller.services.report import ServiceReport
from kuryr_supervisor.kubernetes.services import Service

LOG = logging.getLogger(__name__)


class Outcomes:
    """See the module."""

    def __init__(self, rt: Runtime, *, book: ServiceBook,
                 inventory: Inventory, report: ServiceReport,
                 conf: cfg.ConfigOpts, clock: Callable[[], float]) -> None:
        self.rt, self.book, self.inventory = rt, book, inventory
        self.report, self.opts, self.clock = report, conf.services, clock
        #: Services confirmed gone whose load balancer is to be deleted
        self.gone: set[str] = set()
        self._tries: dict[str, int] = {}
        self._not_before: dict[str, float] = {}

    def backoff(self, tries: int) -> float:
        """Seconds before the ``tries``-th attempt after a failure."""
        return min(float(self.opts.resync_interval),
                   2.0 ** min(max(tries - 1, 0), 16))

    def not_before(self, uid: str) -> float:
        return self._not_before.get(uid, 0.0)

    def _named(self, uid: str) -> tuple[str, str]:
        entry = self.book.get(uid)
        if entry is not None:
            return entry[0].namespace, entry[0].name
        ns, _, name = self.inventory.described.get(uid, "").partition("/")
        return ns, name

    def took(self, out: Outcome, pending: set[str]) -> None:
        """One job's outcome (see the module); a Service to try again is
        put back in ``pending``."""
        uid, report = out.uid, self.report
        ns, name = self._named(uid)
        report.wrote(out.writes)
        self.inventory.put(uid, out.actual, out.complete, out.ids,
                           f"{ns}/{name}" if name else "")
        if out.errored:
            report.count("errors")
            report.tell(uid, ns, name, "LoadBalancerError",
                        f"load balancer {out.errored} was in ERROR: deleted "
                        "and made again", warning=True)
        if out.created and out.actual is not None:
            report.tell(uid, ns, name, "LoadBalancerCreated",
                        f"load balancer {out.created} created, VIP "
                        f"{out.actual.vip}, {len(out.actual.listeners)} "
                        "listeners")
        if out.error is None and out.done:
            self._tries.pop(uid, None)
            self._not_before.pop(uid, None)
            report.untell(uid, "LoadBalancerRefused")
            if out.actual is None and self.book.get(uid) is None:
                self.gone.discard(uid)
                self.book.settled(uid)
                report.forget(uid)
            self.rt.succeeded()
            return
        tries = self._tries[uid] = self._tries.get(uid, 0) + 1
        self._not_before[uid] = self.clock() + self.backoff(tries)
        pending.add(uid)
        error = out.error
        if isinstance(error, OpenStackRefused):
            report.count("refusals")
            report.tell(uid, ns, name, "LoadBalancerRefused",
                        f"Octavia refuses its load balancer: "
                        f"{str(error)[:400]}", warning=True)
        elif isinstance(error, OpenStackError):
            LOG.info("Service %s/%s waits (try %d): %s", ns, name, tries,
                     error)
        elif error is not None:
            self.rt.failed()
        elif not out.done:
            LOG.info("Service %s/%s: its load balancer is not as wanted yet "
                     "(try %d)", ns, name, tries)

    def not_provided(self, svc: Service, whys: Iterable[str]) -> None:
        """What ``svc`` asks that is not provided (nothing: said no more)."""
        text = "; ".join(whys)
        if text:
            self.report.tell(svc.uid, svc.namespace, svc.name, "NotProvided",
                             f"not provided: {text}")
        else:
            self.report.untell(svc.uid, "NotProvided")

    def left_out(self, svc: Service, addresses: tuple[str, ...]) -> None:
        """Endpoints of ``svc`` in no subnet the controller sees."""
        if addresses:
            shown = ", ".join(addresses[:10]) + (
                f" and {len(addresses) - 10} more" if len(addresses) > 10
                else "")
            self.report.tell(svc.uid, svc.namespace, svc.name,
                             "EndpointsLeftOut",
                             f"endpoints {shown} are in no Neutron subnet the "
                             "controller's project sees: left out of the "
                             "load balancer", warning=True)
        else:
            self.report.untell(svc.uid, "EndpointsLeftOut")

    def publish(self, skipped: set[str], pending: int) -> None:
        """The figures: load balancers by status, Services by kind."""
        states: collections.Counter[str] = collections.Counter(
            "active" if a.status == "ACTIVE" else "pending"
            if a.status in PENDING else "error" if a.status == "ERROR"
            else "other" for a in self.inventory.found.values())
        self.report.figures(states, {
            "wanted": len(self.book.uids() - skipped), "pending": pending,
            "skipped": len(skipped)})
