"""What the health checks say of the node's data plane: the answer of CNI
STATUS, and the report the node's NodeNetwork record carries.

Both are read off the checks by name, so a data-plane check only has to be
named here to reach STATUS and the record:

* :data:`STATUS_CHECKS`: a failing check makes STATUS fail with its code,
  50 (an ADD cannot be served now: OVSDB unusable, ovn-controller down or
  off the Southbound database) or 51 (the pods already running may have
  lost their network too: their flows or the datapath are gone, or the
  network judge finds the node cut off: :mod:`.verdict`); the
  worst failing check answers, unless it is excused (:mod:`.statushold`:
  part of a cluster-wide fault);
* :data:`RECORD_CHECKS`: the local data-plane checks written in the
  record for the controller's judge.

:class:`ReportSource` builds the record's report from the published
verdict (the daemon's readiness and since when), the data-plane check
results and, when the node probes (a canary of its own), its probes'
results: an injected :data:`Probes` provider, None until the node has one;
and the pods whose port is lost (``lost``: the Watcher's book in shared
memory), which are not a data-plane check: they never fail STATUS.

Pure but for the clock: tested with plain values, no daemon.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping

from kuryr_supervisor.health.checks.base import Result
from kuryr_supervisor.netcheck.codecs.record import (
    Canary,
    Daemon,
    LocalCheck,
    NetworkReport,
    Probe,
)
from kuryr_supervisor.state import Overall, StatusCause
from kuryr_supervisor.state.lostports import LostPorts

#: check name -> (STATUS code while it fails, cause)
STATUS_CHECKS: dict[str, tuple[int, StatusCause]] = {
    "ovsdb": (50, StatusCause.OVSDB),
    "ovn-controller": (50, StatusCause.OVN_CONTROLLER),
    "flows": (51, StatusCause.FLOWS),
    "datapath": (51, StatusCause.DATAPATH),
    "bridge": (50, StatusCause.BRIDGE),
    "network-verdict": (51, StatusCause.JUDGE),
}
#: The local data-plane checks a node reports in its record, in this order
#: (never the judge's own verdict: it would feed itself).
RECORD_CHECKS = ("ovn-controller", "flows", "datapath", "ovsdb", "bridge")
#: Readiness checks the record's ``daemon.ready`` leaves out, for the same
#: reason.
NOT_REPORTED = ("network-verdict",)

#: name -> the check's last result (the I/O snapshot's)
Results = Mapping[str, Result]
#: (gateway, peers, canary) as the node's prober last found them
ProbeResults = tuple["Probe | None", "tuple[Probe, ...]", "Canary | None"]
Probes = Callable[[], ProbeResults]


def status_answer(results: Results, excused: Collection[str] = ()
                  ) -> tuple[int, StatusCause, str]:
    """(code, cause, detail) STATUS answers: 0 when every data-plane check
    passes (or fails ``excused``: :mod:`.statushold`), else the highest
    code among the failing ones, naming them."""
    failing = [(code, cause, f"{name}: {results[name].message}")
               for name, (code, cause) in STATUS_CHECKS.items()
               if name in results and not results[name].ok
               and name not in excused]
    if not failing:
        return 0, StatusCause.NONE, ""
    worst = max(code for code, _, _ in failing)
    first = next(f for f in failing if f[0] == worst)
    return worst, first[1], "; ".join(text for _, _, text in failing)


class ReportSource:
    """The node's :class:`~kuryr_supervisor.netcheck.codecs.record.NetworkReport`
    from the published verdict, the check results and the probes."""

    def __init__(self, overall: Callable[[], Overall],
                 results: Callable[[], Results], *,
                 probes: Probes | None = None,
                 lost: Callable[[], LostPorts] = LostPorts,
                 service: Callable[[], Probe | None] = lambda: None,
                 node_port_wanted: bool = False,
                 wall: Callable[[], float] = time.time) -> None:
        self._overall, self._results = overall, results
        self._probes, self._lost = probes, lost
        #: The canary's probe of the canary Service's VIP (None: none).
        self._service = service
        #: The node plugs a node port when given one (its record says so).
        self._node_port_wanted = node_port_wanted
        self._wall = wall
        self._ready: bool | None = None
        self._since = wall()

    def __call__(self) -> NetworkReport:
        overall = self._overall()
        ready = overall.ready and overall.checked_at > 0
        if ready != self._ready:
            self._ready, self._since = ready, self._wall()
        results = self._results()
        checks = tuple(LocalCheck(name, results[name].ok,
                                  results[name].message)
                       for name in RECORD_CHECKS if name in results)
        gateway, peers, canary = (self._probes() if self._probes is not None
                                  else (None, (), None))
        return NetworkReport(Daemon(ready, self._since, overall.summary),
                             checks, gateway, peers, canary,
                             canary_wanted=self._probes is not None,
                             lost=self._lost(), service=self._service(),
                             node_port_wanted=self._node_port_wanted)
