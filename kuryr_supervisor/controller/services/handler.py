"""The ``services`` handler: Kubernetes Services as Octavia load balancers
on the OVN provider, on the leader only.

A thin shell: it watches every Service (in its loop) and every
EndpointSlice of a Service (in a thread of its own) into the book
(:mod:`.book`), and at every tick of its loop, at least every heartbeat,
sooner when work waits, it steps the reconciliation (:mod:`.reconcile`):
a full look at the cluster's load balancers at start and every
``resync_interval`` (three Octavia lists), a job per Service that
differs (:mod:`.work`: plan, one write, wait for the load balancer to
settle, plan again), a few at once, their outcomes told (:mod:`.outcomes`,
:mod:`.report`).

What a Service becomes: :mod:`.desired`; the writes: :mod:`.plan`;
ownership (tags, names from the Service's UID, no finalizers):
:mod:`.inventory`. Writes to Octavia and to Kubernetes (Events) are
fenced like the port handler's: a replica that lost its Lease writes
nothing more. Ready once both watches listed and the first
reconciliation tried every Service; an outage of Octavia or Neutron is
not the handler's failure (the ``octavia`` readiness check names it, the
Services wait, and the handler catches up when it answers), nor does it
hold the port handler, a process of its own. Every Octavia call of the
loop is bounded by the adapter's deadline while the loop beats; the
workers' calls by the request timeout, the loop beating while it waits
for none of them.

Built by :func:`.assembly.build` (the entry point), every collaborator
given.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kuryr_supervisor.controller.runtime import Runtime
from kuryr_supervisor.controller.services.book import (
    ServiceBook,
    ServiceSink,
    SliceSink,
)
from kuryr_supervisor.controller.services.reconcile import Reconciler
from kuryr_supervisor.controller.services.report import ServiceReport
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes.services import EndpointSlices, Services

LOG = logging.getLogger(__name__)


def _idle() -> None:
    """The slices' watch thread does not beat: the loop does."""


class ServicesHandler:
    """See the module docstring; built by :func:`.assembly.build`."""

    def __init__(self, rt: Runtime, *, client: k8s.K8sClient,
                 book: ServiceBook, reconciler: Reconciler,
                 report: ServiceReport, halt: threading.Event) -> None:
        """``halt`` is set when :meth:`run` ends: the workers' waits end
        with it."""
        self.rt, self.client, self.book = rt, client, book
        self.reconciler, self.report, self.halt = reconciler, report, halt
        self._beat = rt.beat
        self._ready = False

    def run(self, stopping: threading.Event, beat: Callable[[], None]) -> None:
        with self.rt.running(beat):
            self.report.start()
            slices = threading.Thread(
                target=self.rt.informer(
                    EndpointSlices(self.client), SliceSink(self.book),
                    heartbeat=_idle, what="EndpointSlice",
                    on_synced=_idle).run,
                args=(stopping,), name="endpointslices", daemon=True)
            slices.start()
            try:
                self.rt.informer(
                    Services(self.client, beat=self._beat),
                    ServiceSink(self.book), heartbeat=self.tick,
                    what="Service", wake_in=self.reconciler.wake_in,
                    on_synced=_idle).run(stopping)
            finally:
                self.halt.set()
                self.reconciler.pool.shutdown(wait=False, cancel_futures=True)
                self.report.stop()

    def finish(self, timeout: float) -> None:
        """Nothing to finish: what a stop leaves half done (a load
        balancer pending), the next process's first look finds."""

    def tick(self) -> None:
        """Heartbeat, then a step of the reconciliation; ready once the
        first one is done."""
        self._beat()
        try:
            self.reconciler.step()
        except k8s.K8sError as exc:     # an outage, not our failure
            LOG.info("services: reconciliation postponed: %s", exc)
        except Exception:  # noqa: BLE001 - counted, the loop goes on
            LOG.exception("services: reconciliation failed")
            self.rt.failed()
        if self.reconciler.ready and not self._ready:
            self._ready = True
            self.rt.ready(True)
