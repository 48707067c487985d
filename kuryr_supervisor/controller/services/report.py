"""What the services handler tells: Events on the Services, the figures
in shared memory (``/metrics``), the log, each once per change.

Events (reasons in :data:`REASONS`), on the Service (``kubectl describe
service`` shows them):

- Normal ``LoadBalancerCreated``: its load balancer was made;
- Normal ``NotProvided``: what the Service asks that is not provided
  (a ``NodePort`` or ``LoadBalancer`` type's node ports and external
  load balancer, a protocol not taken, an IPv6-only Service);
- Warning ``EndpointsLeftOut``: endpoints in no Neutron subnet the
  controller sees, left out of the pools;
- Warning ``LoadBalancerError``: its load balancer was found in ERROR
  (it is deleted and made again, with backoff while that fails);
- Warning ``LoadBalancerRefused``: Octavia refuses what the Service asks
  (its VIP held by someone else, a quota met, an option the provider
  does not take); tried again with backoff.

An Event is posted when what it says changes (the same reason with the
same words is not said again), through the recorder's queue (never
blocking the handler's loop).
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from kuryr_supervisor.kubernetes import events
from kuryr_supervisor.state.lbstats import LoadBalancerBoard

LOG = logging.getLogger(__name__)

REASONS = ("LoadBalancerCreated", "NotProvided", "EndpointsLeftOut",
           "LoadBalancerError", "LoadBalancerRefused")
#: Services remembered as told; older ones may be told again.
MEMORY = 10_000


class ServiceReport:
    """See the module; ``board`` None (no daemon): no figures."""

    def __init__(self, recorder: events.EventRecorder,
                 board: LoadBalancerBoard | None) -> None:
        self.recorder, self.board = recorder, board
        #: (uid, reason) -> what was said
        self._told: dict[tuple[str, str], str] = {}
        self._octavia = ""          # the outage last said ("": none)

    def start(self) -> None:
        self.recorder.start()

    def stop(self) -> None:
        self.recorder.stop()

    def tell(self, uid: str, namespace: str, name: str, reason: str,
             message: str, *, warning: bool = False) -> None:
        """An Event on the Service, once per change of ``message``."""
        key = (uid, reason)
        if self._told.get(key) == message:
            return
        self._told[key] = message
        while len(self._told) > MEMORY:
            self._told.pop(next(iter(self._told)))
        (LOG.warning if warning else LOG.info)(
            "Service %s/%s: %s", namespace, name, message)
        self.recorder.record(events.Note(
            "Warning" if warning else "Normal", reason, message[:1024],
            key=uid, subject=events.Subject("Service", name, namespace,
                                            uid=uid)))

    def untell(self, uid: str, reason: str) -> None:
        """What ``reason`` said of the Service no longer holds: said again
        if it comes back."""
        self._told.pop((uid, reason), None)

    def forget(self, uid: str) -> None:
        for reason in REASONS:
            self._told.pop((uid, reason), None)

    def octavia(self, outage: str) -> None:
        """Octavia (or Neutron's subnet list) fails (``outage``: why) or
        answers again (""): logged once per change."""
        if outage and not self._octavia:
            LOG.warning("load balancers wait: %s", outage)
        elif not outage and self._octavia:
            LOG.info("Octavia answers again")
        self._octavia = outage

    def wrote(self, kinds: Iterable[str]) -> None:
        if self.board is not None:
            for kind in kinds:
                self.board.wrote(kind)

    def count(self, name: str) -> None:
        if self.board is not None:
            self.board.count(name)

    def figures(self, states: Mapping[str, int],
                services: Mapping[str, int]) -> None:
        if self.board is not None:
            self.board.gauges(dict(states), dict(services))
