"""Which failing data-plane checks CNI STATUS does not fail for now, and
why: the node's part in keeping a cluster-wide fault off the Nodes.

A runtime on libcni 1.2 (containerd 2.x, CRI-O) turns a failing STATUS
into the node's ``Ready=False``: the node lifecycle controller then
taints it not-ready (NoSchedule, and NoExecute evicting its pods after
300 s), and an auto-healer on ``Ready`` rebuilds it. During a cluster-wide
fault (the Southbound database stopped) that would be every node at once.
So, with a network judge (:class:`~.clusterview.ClusterView`), a failing
check is **excused**:

* ``CLUSTER`` while the judge has declared a cluster-wide fault whose
  kind is the check's name and the declaration stands (renewed within its
  lifetime: a judge that is gone excuses nothing for long; the check's
  failure is the cloud's fault, not the node's; the judge changes no
  condition either);
* ``HELD`` for ``[network_health] status_hold`` seconds from its first
  failure when its cause is one every node typically meets at once
  (:attr:`Result.shared <kuryr_supervisor.health.checks.base.Result.
  shared>`: ovn-controller off the Southbound database) and the judge may
  yet declare it: the nodes see such a fault within a second, the judge
  needs the records of most of them, and each node learns the verdict
  from its record; past the hold, STATUS fails as before.

An excused check still fails readiness, naming its cause, and ADDs fail
with code 11 naming it (the port is never installed); only STATUS, and so
the Node's ``Ready``, is spared. A node the judge does not judge (no
controller, standalone) excuses nothing. The view learns each verdict the
moment it is written (the record's watch): nothing here asks for it.

Pure but for the clock and the view: tested with plain values.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kuryr_supervisor.netcheck.node.clusterview import ClusterView
from kuryr_supervisor.netcheck.node.dataplane import STATUS_CHECKS, Results
from kuryr_supervisor.state.cnistatus import Excuse

LOG = logging.getLogger(__name__)

class StatusHold:
    """See the module; a call is one look (name -> excuse)."""

    def __init__(self, view: ClusterView, hold: Callable[[], float], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.view, self._hold = view, hold
        self._clock = clock
        #: (check, shared) -> since when it fails so
        self._since: dict[tuple[str, bool], float] = {}
        self._said: dict[str, Excuse] = {}

    def __call__(self, results: Results) -> dict[str, Excuse]:
        now = self._clock()
        failing = {(name, results[name].shared) for name in STATUS_CHECKS
                   if name in results and not results[name].ok}
        self._since = {key: self._since.get(key, now) for key in failing}
        judged, fault = self.view.judged, self.view.cluster_fault()
        hold = float(self._hold())
        out: dict[str, Excuse] = {}
        for name, shared in failing:
            if judged and fault == name:
                out[name] = Excuse.CLUSTER
            elif shared and judged is not False and \
                    now - self._since[(name, shared)] < hold:
                out[name] = Excuse.HELD
        self._tell(out, hold)
        return out

    def _tell(self, out: dict[str, Excuse], hold: float) -> None:
        """Log each check's excuse once per change."""
        for name, excuse in out.items():
            if self._said.get(name) == excuse:
                continue
            if excuse is Excuse.HELD:
                LOG.warning("CNI STATUS holds %s for up to %.0f s: a cause "
                            "every node meets at once, waiting for the "
                            "network judge's verdict", name, hold)
            else:
                LOG.warning("CNI STATUS does not fail for %s: the network "
                            "judge declared a cluster-wide fault of that "
                            "kind (ADDs still fail, readiness names it)",
                            name)
        for name in set(self._said) - set(out):
            LOG.info("CNI STATUS no longer excuses %s", name)
        self._said = dict(out)
