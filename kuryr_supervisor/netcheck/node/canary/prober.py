"""The canary's prober: a thread inside the canary's namespace that runs a
round of probes (:func:`~.probes.probe_round`) every interval, and the
responder that answers the peers' probes.

The agent tells it what to probe and how often (:meth:`Prober.aim`: the
controller's share for this node); it keeps the last outcome of each
target, read without waiting (:meth:`Prober.outcomes`). A round is
bounded by ``[network_health] probe_timeout``; the interval is the
controller's (it grows with the cluster), so the probes this node sends
stay bounded whatever the cluster's size. The CPU the thread spends is
counted (:attr:`Prober.cpu_seconds`, and the responder's own) for the
benchmark and ``/metrics``.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import logging
import threading
import time
from collections.abc import Callable

from kuryr_supervisor.netcheck.node.canary.netns import OwnNetns
from kuryr_supervisor.netcheck.node.canary.probes import (
    Outcome,
    Responder,
    Target,
    icmp_socket,
    probe_round,
)

LOG = logging.getLogger(__name__)
#: TCP exchanges with the canary Service's VIP in a round (see
#: :class:`~.probes.Target`).
VIP_TRIES = 3


@dataclasses.dataclass(frozen=True)
class Aim:
    """What to probe: the gateway (ICMP), peers (node, address) and the
    canary Service's VIP."""

    gateway: ipaddress.IPv4Address | None = None
    peers: tuple[tuple[str, ipaddress.IPv4Address], ...] = ()
    interval: float = 0.0            # 0: no probing
    #: The canary Service's VIP and port (TCP alone), if any.
    service: tuple[ipaddress.IPv4Address, int] | None = None

    def targets(self) -> list[Target]:
        out = [Target(a, True) for _, a in self.peers]
        if self.gateway is not None:
            out.append(Target(self.gateway, False))
        if self.service is not None:
            out.append(Target(self.service[0], True, self.service[1],
                              icmp=False, tries=VIP_TRIES))
        return out


@dataclasses.dataclass(frozen=True)
class Seen:
    """The last round: its aim, when it ended, each target's outcome."""

    aim: Aim
    at: float
    outcomes: dict[ipaddress.IPv4Address, Outcome]


class Prober:
    """See the module; ``timeout`` and ``port`` are read at every round
    (SIGHUP)."""

    def __init__(self, netns: OwnNetns, *, port: Callable[[], int],
                 timeout: Callable[[], float],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.netns = netns
        self._port, self._timeout = port, timeout
        self._clock = clock
        self._cond = threading.Condition()
        self._aim = Aim()
        self._seen: Seen | None = None
        self._stop = False
        self.rounds = 0
        self.cpu_seconds = 0.0
        self.icmp = True
        self.responder = Responder(port(), netns.enter)
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="canary-prober")

    def start(self) -> Prober:
        self.responder.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self.responder.stop()

    def aim(self, aim: Aim) -> None:
        """Probe ``aim`` from now on (a new aim starts a round at once)."""
        with self._cond:
            if aim != self._aim:
                self._aim = aim
                self._cond.notify_all()

    def outcomes(self) -> Seen | None:
        """The last round of the current aim; None before one."""
        with self._cond:
            seen = self._seen
            return seen if seen is not None and seen.aim == self._aim \
                else None

    def _run(self) -> None:
        self.netns.enter()
        icmp = icmp_socket()
        if icmp is None:
            self.icmp = False
            LOG.warning("canary: no ICMP (a raw socket needs CAP_NET_RAW): "
                        "peers are probed by TCP alone, the gateway not at "
                        "all")
        due = 0.0
        try:
            while True:
                with self._cond:
                    while not self._stop and (
                            self._aim.interval <= 0 or
                            (self._clock() < due and self._seen is not None
                             and self._seen.aim == self._aim)):
                        wait = due - self._clock() if self._aim.interval \
                            else None
                        self._cond.wait(wait)
                    if self._stop:
                        return
                    aim = self._aim
                started = self._clock()
                outcomes = probe_round(
                    [t for t in aim.targets() if t.tcp or icmp is not None],
                    port=int(self._port()), timeout=float(self._timeout()),
                    icmp=icmp)
                self.cpu_seconds = time.thread_time()
                with self._cond:
                    self._seen = Seen(aim, self._clock(), outcomes)
                    self.rounds += 1
                due = started + aim.interval
        finally:
            if icmp is not None:
                icmp.close()
