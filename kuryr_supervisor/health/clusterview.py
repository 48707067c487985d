"""What the network judge last said of the cluster, as this node knows it:
the judge's part of the node's own NodeNetwork record's spec
(:mod:`kuryr_supervisor.kubernetes.clusterspec`).

Cheap by construction: whoever has the record in hand tells the view
(:meth:`ClusterView.take`: the record writer with the answer of each of
its writes, the canary's agent with each of its reads), so at steady
state the view costs no request at all. It reads the record itself
(:meth:`ClusterView.step`, one GET of this node's record) only while CNI
STATUS needs a fresher word (:meth:`ClusterView.want`: every second while
a shared cause is held, every 10 s while a failing check is excused or
failing), never more often.

What it knows (:attr:`ClusterView.judged`): None before any word (the
first write comes at start), False when no judge judges this node (no
``cluster`` in the spec, no record, the API serves no records: the node
then keeps the behaviour of a node without a controller), True with the
verdict. A spec that does not hold up is said once and leaves the last
word as it was. Read from the HealthManager's threads: each word is one
attribute, replaced whole.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kuryr_supervisor.kubernetes import clusterspec
from kuryr_supervisor.kubernetes.clusterspec import ClusterVerdict
from kuryr_supervisor.kubernetes.wire import K8sError

LOG = logging.getLogger(__name__)

#: Seconds between two looks of the view's loop.
INTERVAL = 0.25


class SpecCalls(Protocol):
    def get_nodenetwork(self, name: str) -> dict[str, Any] | None: ...


class ClusterView:
    """See the module."""

    def __init__(self, calls: SpecCalls, node: str, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.calls, self.node = calls, node
        self._clock = clock
        #: (judged, verdict): see the module
        self._word: tuple[bool | None, ClusterVerdict] = (None,
                                                          ClusterVerdict())
        self._at: float | None = None
        self._every: float | None = None
        self._said = ""

    @property
    def judged(self) -> bool | None:
        return self._word[0]

    @property
    def verdict(self) -> ClusterVerdict:
        """The cluster-wide fault declared (``fault`` empty: none)."""
        return self._word[1]

    def take(self, obj: Mapping[str, Any] | None) -> None:
        """The record as someone just had it (None: there is none)."""
        try:
            found = clusterspec.verdict(obj, self.node)
        except ValueError as exc:
            self._say(f"the judge's part of the record is refused: {exc}")
            return
        self._at = self._clock()
        self._set((False, ClusterVerdict()) if found is None
                  else (True, found))

    def absent(self) -> None:
        """The API serves no NodeNetworks: no judge here."""
        self._at = self._clock()
        self._set((False, ClusterVerdict()))

    def _set(self, word: tuple[bool | None, ClusterVerdict]) -> None:
        if word != self._word:
            judged, verdict = word
            LOG.info("the network judge says: %s", (
                f"cluster-wide fault ({verdict.fault}) since {verdict.since}"
                if verdict.fault else "no cluster-wide fault" if judged
                else "nothing (it does not judge this node)"))
        self._word = word
        self._said = ""

    def want(self, every: float | None) -> None:
        """How fresh CNI STATUS needs the word: at most ``every`` seconds
        old (None: as it comes)."""
        self._every = every

    def step(self) -> None:
        """The loop's body: read the record when the word is older than
        wanted."""
        every, now = self._every, self._clock()
        if every is None or (self._at is not None and now - self._at < every):
            return
        self._at = now
        try:
            obj = self.calls.get_nodenetwork(self.node)
        except K8sError as exc:
            self._say(f"cannot read the node's record: {exc}")
            return
        self.take(obj)

    def _say(self, text: str) -> None:
        if text != self._said:
            LOG.warning("cluster view: %s", text)
            self._said = text
