"""How big a port create may be, how long it may take, and how long its
ports may still appear after its answer was lost.

Neutron's port create is slow and shared: 0.1-0.3 s a port on a real one,
whatever the batch (a bulk is one transaction, no cheaper per port), and
slower still while other requests run. A create whose answer timed out is
not over: Neutron may commit it for as long as it works on it (a bulk of
100 took 40 s where the client gave up after 5 s). So :class:`Pace`:

- measures Neutron's time per port, an exponentially weighted moving
  average (EWMA, weight :data:`ALPHA`) of each answered create's duration
  divided by its ports (requests in parallel included: what a port costs
  now, not alone);
- sizes requests from it: as many ports as take about ``batch_seconds``
  (at least 1, at most ``size``, the port handler's largest bulk); before the first
  answer, one request of :data:`FIRST` ports alone measures it (a slow
  start: a burst's first pods are not held behind one huge request);
- gives each request a timeout that grows with its size:
  ``timeout + ports * max(per_port, SAFETY * EWMA)``, at most
  ``timeout_max``, so a timeout means Neutron is far slower than measured,
  not that a request was big;
- says until when a request whose answer was lost (a timeout or a
  dropped connection: no status) may still commit: its send time plus
  :data:`COMMIT_WAIT` times its timeout. Its pods get no new create
  before then; a port it commits later is found by the next port list
  and adopted, or, if the pod already has one, deleted as a duplicate;
- says how long a request is announced for (the create announcer of
  :mod:`kuryr_supervisor.controller.leadership`, read by
  a process that starts after its sender died, which cannot know whether
  the request ever reached Neutron): :data:`COMMIT_WAIT` times how long
  Neutron plausibly works on it (:meth:`Pace.likely_for`), not times its
  timeout, whose floor per port is sized against false timeouts: with a
  Neutron at 10 ms a port a bulk of 100 has a 55 s timeout, and a create
  its dying sender never sent whole would hold its pods close to 3 min.

Pure but for the injected clock; the handler keeps one per process.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from oslo_config import cfg

from kuryr_supervisor.controller.openstack import timeouts

#: Weight of the newest measurement in the EWMA.
ALPHA = 0.3
#: A request may take this many times the measured time per port.
SAFETY = 3.0
#: A lost create may commit until this many of its timeouts after its send.
COMMIT_WAIT = 3.0
#: Ports of the first request, sent alone, before anything is measured.
FIRST = 10


class Pace:
    """See the module. ``timeout``: a request's base timeout (the request
    timeout, :func:`.timeouts.request_timeout`); ``per_port``: the least
    time allowed per port; ``timeout_max``: the longest timeout of one
    request; ``batch_seconds``: how long one request should take;
    ``size``: most ports a request."""

    def __init__(self, *, timeout: float, per_port: float,
                 timeout_max: float, batch_seconds: float, size: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout, self.per_port = timeout, per_port
        self.timeout_max, self.batch_seconds = timeout_max, batch_seconds
        self.size = size
        self.ewma: float | None = None        # seconds per port, measured
        self._clock = clock

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts, *, size: int,
                  clock: Callable[[], float] = time.monotonic) -> Pace:
        """The pace ``[controller]``'s options set: the request timeout
        (:func:`.timeouts.request_timeout`) and the create options."""
        opts = conf.controller
        return cls(timeout=timeouts.request_timeout(conf),
                   per_port=float(opts.port_create_timeout_per_port),
                   timeout_max=float(opts.port_create_timeout_max),
                   batch_seconds=float(opts.port_batch_seconds), size=size,
                   clock=clock)

    def batch_size(self) -> int:
        """Ports in the next request (see the module)."""
        if not self.ewma:
            return min(FIRST, self.size)
        return max(1, min(self.size, int(self.batch_seconds / self.ewma)))

    def in_flight(self, most: int) -> int:
        """Requests to have at Neutron at once: one until measured."""
        return most if self.ewma else 1

    def timeout_for(self, ports: int) -> float:
        """The timeout of a request of ``ports`` ports."""
        per = max(self.per_port, SAFETY * (self.ewma or 0.0))
        return min(self.timeout_max, self.timeout + ports * per)

    def likely_for(self, ports: int) -> float:
        """How long Neutron plausibly works on a request of ``ports``
        ports: ``timeout + ports * SAFETY * EWMA`` once measured (the
        timeout without its floor per port), the timeout before; never
        more than the timeout."""
        timeout = self.timeout_for(ports)
        if not self.ewma:
            return timeout
        return min(timeout, self.timeout + ports * SAFETY * self.ewma)

    def answered(self, ports: int, seconds: float) -> None:
        """A request of ``ports`` ports was answered after ``seconds``."""
        if ports <= 0:
            return
        sample = seconds / ports
        self.ewma = sample if self.ewma is None else (
            ALPHA * sample + (1 - ALPHA) * self.ewma)

    @staticmethod
    def may_commit_until(sent: float, timeout: float) -> float:
        """Until when (``clock`` time) a request sent at ``sent`` with
        ``timeout`` whose answer was lost may still commit its ports."""
        return sent + COMMIT_WAIT * timeout

    def now(self) -> float:
        return self._clock()
