"""The network_policy handler's reconciliation: when to pass, what a pass
starts from, what its outcome makes of the next.

Run from the handler's loop (:meth:`Reconciler.step`): once every watch
has listed, a pass (:mod:`.apply`) runs

- after any change of the book (a NetworkPolicy, a pod, a namespace, a
  node): many changes between two passes are one pass;
- every ``resync_interval``, from a full look (:func:`.inventory.look`:
  a list per kind), which the
  first pass, a pass after an outage and one that found something
  vanished also start from; between two looks the inventory is what the
  handler's own writes left (a restart's first pass writes nothing that
  is already right: it starts from a look);
- again with backoff (1 s doubling to ``retry_max``) while something
  failed or waits.

A Neutron that does not answer (or refuses a list) ends the pass: every
policy is pending, the board says Neutron is down (readiness names it),
and the next pass, with backoff, starts from a full look. Ready once the
first pass was tried.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from oslo_config import cfg

from kuryr_supervisor.controller.openstack.wire import (
    OpenStackError,
    OpenStackRefused,
)
from kuryr_supervisor.controller.policy import desired as model
from kuryr_supervisor.controller.policy.apply import Pass
from kuryr_supervisor.controller.policy.book import PolicyBook, Snapshot
from kuryr_supervisor.controller.policy.inventory import (
    Inventory,
    addressed,
    look,
    port_views,
)
from kuryr_supervisor.controller.policy.naming import Naming
from kuryr_supervisor.controller.policy.report import PolicyReport
from kuryr_supervisor.controller.policy.tally import Result
from kuryr_supervisor.kubernetes import client as k8s

LOG = logging.getLogger(__name__)

#: Seconds the loop waits at most before it looks at a changed book.
GLANCE = 0.1
FAMILIES = ("IPv4",)


class Reconciler:
    """See the module; ``naming`` the cluster's names (asked once it
    works)."""

    def __init__(self, conf: cfg.ConfigOpts, *, book: PolicyBook, api: Any,
                 naming: Callable[[], Naming], report: PolicyReport,
                 network_id: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.opts = conf.network_policy
        self.book, self.api, self.naming = book, api, naming
        self.report, self.network_id = report, network_id
        self.clock = clock
        self.inventory: Inventory | None = None
        self.next_look = 0.0
        self.retry_at: float | None = None
        self.tries = 0
        self.ready = False
        self.last: Result | None = None
        self._first = True

    def backoff(self) -> float:
        return min(float(self.opts.retry_max),
                   2.0 ** min(max(self.tries - 1, 0), 16))

    def wake_in(self) -> float:
        """Seconds until the next pass may be due (the loop's wait)."""
        now = self.clock()
        if self.inventory is None:
            due = now if self.retry_at is None else self.retry_at
        else:
            due = min(self.next_look, self.retry_at or self.next_look)
            if self.book.changed.is_set():
                due = now
        return max(GLANCE, due - now)

    def _due(self, now: float) -> bool:
        """A change, a look or a retry is due; while Neutron is out, the
        retry alone (changes wait for it)."""
        if self.retry_at is not None and now >= self.retry_at:
            return True
        if self.inventory is None and self.retry_at is not None:
            return False        # an outage: its backoff
        return self.book.changed.is_set() or self.inventory is None or \
            now >= self.next_look

    def step(self) -> None:
        """One pass if one is due (see the module)."""
        if not self.book.synced or not self._due(self.clock()):
            return
        snap = self.book.snapshot()
        try:
            result = self._pass(snap)
        except OpenStackError as exc:
            self._outage(snap, exc)
            return
        except k8s.K8sError:
            # kube-system unread (the cluster's names): tried again with
            # backoff, what it missed with it.
            self.book.changed.set()
            self.tries += 1
            self.retry_at = self.clock() + self.backoff()
            raise
        finally:
            self.ready = True
        self._took(snap, result)

    def _pass(self, snap: Snapshot) -> Result:
        naming, now = self.naming(), self.clock()
        if self.inventory is None or now >= self.next_look:
            self.inventory = look(
                self.api, naming, network_id=self.network_id,
                defaults=list(self.opts.default_security_groups))
            self.next_look = now + float(self.opts.resync_interval)
        inv = self.inventory
        want = self._desired(snap, naming, inv)
        return Pass(self.api, naming, want, inv, uids=snap.uids,
                    find_ports=lambda uids: port_views(
                        self.api, uids, self.network_id),
                    ports_per_pass=int(self.opts.ports_per_pass)).run()

    def _desired(self, snap: Snapshot, naming: Naming,
                 inv: Inventory) -> model.Desired:
        if not snap.policies:
            return model.Desired({}, {}, {})
        nodes = {node: tuple(dict.fromkeys((*addresses,
                                            *inv.node_ports.get(node, ()))))
                 for node, addresses in snap.nodes.items()}
        for pod in snap.pods:       # a node whose watch has not said it
            if pod.node and pod.node not in nodes:
                nodes[pod.node] = inv.node_ports.get(pod.node, ())
        infra = model.Infrastructure(nodes, inv.canaries)
        return model.desired(snap.policies, addressed(snap, inv),
                             snap.namespaces,
                             naming, infrastructure=infra, families=FAMILIES)

    def _outage(self, snap: Snapshot, exc: OpenStackError) -> None:
        self.inventory = None
        self.book.changed.set()         # what it missed: passed again
        state = "refusing" if isinstance(exc, OpenStackRefused) else "down"
        self.report.neutron(state, str(exc))
        self.report.states(snap.policies, {}, (), outage=str(exc)[:400])
        self.tries += 1
        self.retry_at = self.clock() + self.backoff()
        LOG.info("NetworkPolicies: pass postponed %.0f s (try %d): %s",
                 self.backoff(), self.tries, exc)

    def _took(self, snap: Snapshot, result: Result) -> None:
        self.last = result
        self.report.wrote(result.writes)
        self.report.refused(len(result.failed))
        self.report.neutron("refusing" if result.failed else "ok",
                            next(iter(result.failed.values()), ""))
        self.report.states(snap.policies, result.failed, result.pending,
                           quiet=self._first and not any(
                               result.writes.values()))
        self._first = False
        if result.look_again:
            self.next_look = self.clock()
        if result.failed or result.pending or result.leftover or \
                result.look_again:
            self.tries += 1
            self.retry_at = self.clock() + self.backoff()
        else:
            self.tries, self.retry_at = 0, None
        if any(result.writes.values()):
            LOG.info("NetworkPolicies: %s", ", ".join(
                f"{n} {k}" for k, n in sorted(result.writes.items())))
