"""What a failed step of the port handler costs: a retry, a count, or nothing.

The port handler's failure policy, in one place, so that what counts
against its failure budget is decided here and nowhere else:

- a Kubernetes, Keystone or Neutron outage (a timeout, a 5xx, an answer
  that is not JSON), an exhausted port quota, a full pod subnet, or a
  refusal no restart fixes (the pod network or subnet deleted, a policy
  that forbids the creates: :data:`~kuryr_supervisor.controller.openstack.
  wire.UNFIXABLE`) is not the handler's
  fault: the pod waits in :attr:`Retries.pending`, is retried with backoff
  (:data:`RETRY_MIN` doubling to :data:`RETRY_MAX` while pods still wait),
  and the log names the dependency once per outage;
- a conflict on a PodPort (409: it changed since read) is retried;
- other refusals of the Kubernetes API (404: the pod or its namespace is
  gone; 403/422: RBAC or the CRD) are logged and left to the pod's next
  event;
- anything else is retried and counted (``ctx.failed()``); any success
  resets the count (``ctx.succeeded()``).

A deleted or finished pod's release is never retried here: the next
resync deletes what it left (its sweep, or :mod:`.finished`).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack.wire import UNFIXABLE, SubnetFull
from kuryr_supervisor.controller.ports.book import PodRecord
from kuryr_supervisor.kubernetes import client as k8s

LOG = logging.getLogger(__name__)

#: First and longest wait before pods that failed are tried again (seconds).
RETRY_MIN, RETRY_MAX = 0.5, 30.0
#: Errors that are a dependency's outage, not the handler's fault.
OUTAGES = (osa.OpenStackUnavailable, osa.QuotaExceeded, SubnetFull,
           *UNFIXABLE, k8s.K8sTemporary)


class Counted(Protocol):
    """Where the handler's failed and successful steps are counted (its
    :class:`~kuryr_supervisor.controller.runtime.Runtime`)."""

    def failed(self) -> int: ...

    def succeeded(self) -> None: ...


class Retries:
    """The pods waiting for another try, and when it is due; ``ctx``
    counts the steps."""

    def __init__(self, ctx: Counted, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ctx = ctx
        self.pending: set[str] = set()            # uids to retry
        #: When the next retry round is due (``clock`` time).
        self.at = 0.0
        self._delay = RETRY_MIN
        self._clock = clock
        self._outage: str | None = None

    def now(self) -> None:
        """The next round is due at once (the quota has room again)."""
        self.at = 0.0

    def due(self, now: float) -> bool:
        return bool(self.pending) and now >= self.at

    def tried(self) -> None:
        """A retry round is over: the next one backs off while pods still
        wait, and starts from :data:`RETRY_MIN` again once none do."""
        self._delay = (RETRY_MIN if not self.pending else
                       min(RETRY_MAX, self._delay * 2))
        self.at = self._clock() + self._delay

    def wait(self, uids: Iterable[str]) -> None:
        """``uids`` wait for the next round, at no one's fault (a create
        that may still commit, a port list that proved incomplete)."""
        uids = list(uids)
        if uids and not self.pending:
            self.at = self._clock() + self._delay
        self.pending.update(uids)

    def failed(self, uids: Iterable[str], exc: BaseException,
               pods: Mapping[str, PodRecord]) -> None:
        """``uids`` (those still in ``pods``, their records) failed with
        ``exc``; see the module for what follows."""
        uids = [u for u in uids if u in pods]
        if uids and not self.pending:       # the first to wait: not at once
            self.at = self._clock() + self._delay
        if isinstance(exc, OUTAGES):
            self.pending.update(uids)
            if self._outage is None and uids:
                LOG.warning("pod ports wait for a dependency: %s", exc)
            self._outage = str(exc)
            return
        for uid in uids:
            ns, name = pods[uid].namespace, pods[uid].name
            if isinstance(exc, k8s.K8sPermanent) and exc.status == 409:
                self.pending.add(uid)   # the PodPort changed: read it again
            elif isinstance(exc, k8s.K8sPermanent):
                LOG.warning("pod %s/%s: the API refused its PodPort (%s); "
                            "left to the next event", ns, name, exc)
                self.pending.discard(uid)
            else:
                self.pending.add(uid)
                count = self.ctx.failed()
                LOG.error("handling pod %s/%s failed (%d consecutive): %s",
                          ns, name, count, exc)

    def succeeded(self, uid: str = "") -> None:
        """A step went well (``uid``'s, when named: it waits no more)."""
        self.pending.discard(uid)
        if self._outage is not None:
            LOG.info("dependencies answer again")
            self._outage = None
        self.ctx.succeeded()

    def release(self, namespace: str, name: str,
                release: Callable[[], None]) -> bool:
        """Run ``release`` for a deleted or finished pod: an outage or a
        refusal is logged (the resync sweeps what is left), anything else
        counted; whether it went through."""
        try:
            release()
        except (osa.OpenStackError, k8s.K8sError) as exc:
            LOG.warning("pod %s/%s: release left to the sweep: %s",
                        namespace, name, exc)
            return False
        except Exception:  # noqa: BLE001 - counted; one pod never stops the loop
            count = self.ctx.failed()
            LOG.exception("releasing pod %s/%s failed (%d consecutive)",
                          namespace, name, count)
            return False
        self.succeeded()
        return True
