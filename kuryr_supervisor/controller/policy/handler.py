"""The ``network_policy`` handler: Kubernetes NetworkPolicy as Neutron
security groups whose rules name address groups, on the leader only.

A thin shell: it watches every NetworkPolicy (in its loop), every pod,
namespace and node (in a thread each) into the book (:mod:`.book`), and
at every tick of its loop, at least every heartbeat, sooner when the book
changed, steps the reconciliation (:mod:`.reconcile`): a pass
(:mod:`.apply`) from what the handler knows Neutron holds
(:mod:`.inventory`) to what the model asks (:mod:`.desired`), its
outcome told (:mod:`.report`).

Writes to Neutron and to Kubernetes (Events) are fenced like the other
handlers': a replica that lost its Lease writes nothing more. Ownership
is by tags and names derived from UIDs, never a finalizer: a policy
deleted while no handler ran leaves groups that the next look finds and
deletes. An outage of Neutron is not the handler's failure (readiness
names it, the policies wait, the handler catches up when it answers),
nor does it hold the port handler, a process of its own. Ready once
every watch listed and the first pass was tried.

A new pod's port is made in its groups by the port handler, in its own
process (:mod:`kuryr_supervisor.controller.ports.guard`: the model's
:func:`.desired.port_groups`, its own watches of the policies and
namespaces, the group ids listed from Neutron); the handler here sets
them on ports that exist, and on a port the port handler made in no
group because a group was not made yet.

Built by :func:`.assembly.build` (the entry point), every collaborator
given.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kuryr_supervisor.controller.policy.book import (
    DECODERS,
    Item,
    PolicyBook,
    Sink,
)
from kuryr_supervisor.controller.policy.reconcile import Reconciler
from kuryr_supervisor.controller.policy.report import PolicyReport
from kuryr_supervisor.controller.runtime import Runtime
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes.listing import Listing

LOG = logging.getLogger(__name__)
#: Objects per page of a list.
PAGE_SIZE = 500


def _idle() -> None:
    """The pods', namespaces' and nodes' watch threads do not beat: the
    loop does."""


class PolicyHandler:
    """See the module docstring; built by :func:`.assembly.build`."""

    def __init__(self, rt: Runtime, *, client: k8s.K8sClient,
                 book: PolicyBook, reconciler: Reconciler,
                 report: PolicyReport) -> None:
        self.rt, self.client, self.book = rt, client, book
        self.reconciler, self.report = reconciler, report
        self._beat = rt.beat
        self._ready = False

    def _source(self, kind: str) -> Listing[Item[Any]]:
        resource = {"NetworkPolicy": self.client.networkpolicies,
                    "Pod": self.client.pods,
                    "Namespace": self.client.namespaces,
                    "Node": self.client.nodes}[kind]
        return Listing(resource, DECODERS[kind], page_size=PAGE_SIZE,
                       beat=self._beat if kind == "NetworkPolicy" else _idle)

    def run(self, stopping: threading.Event, beat: Callable[[], None]) -> None:
        with self.rt.running(beat):
            self.report.start()
            for kind in ("Pod", "Namespace", "Node"):
                threading.Thread(
                    target=self.rt.informer(
                        self._source(kind), Sink(self.book, kind),
                        heartbeat=_idle, what=kind, on_synced=_idle).run,
                    args=(stopping,), name=f"policy-{kind.lower()}s",
                    daemon=True).start()
            try:
                self.rt.informer(
                    self._source("NetworkPolicy"),
                    Sink(self.book, "NetworkPolicy"), heartbeat=self.tick,
                    what="NetworkPolicy", wake_in=self.reconciler.wake_in,
                    on_synced=_idle).run(stopping)
            finally:
                self.report.stop()

    def finish(self, timeout: float) -> None:
        """Nothing to finish: what a stop leaves half done, the next
        process's first look finds."""

    def tick(self) -> None:
        """Heartbeat, then a step of the reconciliation; ready once the
        first pass was tried."""
        self._beat()
        try:
            self.reconciler.step()
        except k8s.K8sError as exc:     # an outage, not our failure
            LOG.info("network policy: pass postponed: %s", exc)
        except Exception:  # noqa: BLE001 - counted, the loop goes on
            LOG.exception("network policy: pass failed")
            self.rt.failed()
        else:
            if self.reconciler.last is not None:
                self.rt.succeeded()
        if self.reconciler.ready and not self._ready:
            self._ready = True
            self.rt.ready(True)
