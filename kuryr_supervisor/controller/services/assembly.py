"""The ``services`` handler's build function (its entry point).

Every collaborator of :class:`~.handler.ServicesHandler` is built here,
once the process's clients exist (:class:`~kuryr_supervisor.controller.
runtime.Runtime`), and passed to a constructor: nothing is wired after
construction. The order is the dependencies': the book, the Octavia
side (the inventory, the member subnets, the worker and its pool), the
report, the outcomes, the reconciliation, the handler.
"""
from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable

from kuryr_supervisor.controller.runtime import Runtime
from kuryr_supervisor.controller.services.book import ServiceBook
from kuryr_supervisor.controller.services.cluster import Cluster
from kuryr_supervisor.controller.services.handler import ServicesHandler
from kuryr_supervisor.controller.services.inventory import Inventory
from kuryr_supervisor.controller.services.outcomes import Outcomes
from kuryr_supervisor.controller.services.reconcile import Reconciler
from kuryr_supervisor.controller.services.report import ServiceReport
from kuryr_supervisor.controller.services.subnets import Subnets
from kuryr_supervisor.controller.services.work import Worker
from kuryr_supervisor.kubernetes import events


def build(rt: Runtime, *, clock: Callable[[], float] = time.monotonic
          ) -> ServicesHandler:
    """The handler of ``rt``'s process; ``clock``: a test's."""
    conf = rt.conf
    opts = conf.services
    client, cloud = rt.kubernetes(), rt.openstack()
    octavia = cloud.octavia()
    book = ServiceBook()
    cluster = Cluster(client, str(conf.controller.cluster_id or ""))
    inventory = Inventory(octavia)
    subnets = Subnets(cloud.subnets)
    halt = threading.Event()
    worker = Worker(
        octavia.within(octavia.timeout), naming=cluster.naming,
        subnet_of=subnets.of, vip_subnet_id=str(opts.service_subnet_id),
        provider=str(opts.provider or ""),
        settle_timeout=lambda: float(opts.settle_timeout),
        alive=lambda uid: book.get(uid) is not None, stopping=halt,
        clock=clock)
    report = ServiceReport(events.recorder(client),
                           getattr(rt.ctx.state, "load_balancers", None))
    outcomes = Outcomes(rt, book=book, inventory=inventory, report=report,
                        conf=conf, clock=clock)
    pool = concurrent.futures.ThreadPoolExecutor(
        max_workers=int(opts.octavia_requests), thread_name_prefix="lb-job")
    reconciler = Reconciler(
        conf, book=book, inventory=inventory, subnets=subnets, worker=worker,
        pool=pool, report=report, outcomes=outcomes, naming=cluster.naming,
        confirm_gone=cluster.gone, clock=clock)
    return ServicesHandler(rt, client=client, book=book,
                           reconciler=reconciler, report=report, halt=halt)
