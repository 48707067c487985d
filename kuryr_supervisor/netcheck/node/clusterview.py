"""What the network judge last said, as this node knows it: the judge's
part of the node's own NodeNetwork record's spec
(:mod:`kuryr_supervisor.netcheck.codecs.clusterspec`), and whether it still
stands.

Cheap by construction: whoever has the record in hand tells the view
(:meth:`ClusterView.take`: the record's watch, :mod:`.recordfollow`, with
every version, the record writer with the answer of each of its writes),
so the view makes no request of its own and a verdict reaches it the
moment the judge writes it.

What it knows (:attr:`ClusterView.judged`): None before any word, False
when no judge judges this node (no ``cluster`` in the spec, no record, the
API serves no records: the node then keeps the behaviour of a node without
a controller), True with the verdict. A spec that does not hold up is
said once and leaves the last word as it was.

What it vouches for (:meth:`ClusterView.cluster_fault`,
:meth:`ClusterView.node_fault`): a declaration only while it stands
(:func:`~kuryr_supervisor.netcheck.codecs.clusterspec.standing`): renewed within
its lifetime by the node's wall clock, and seen renewed within it by the
node's own monotonic clock, so that neither a judge that is gone nor a
clock that runs behind keeps a node excused or blamed. Each change of what
it vouches for is logged once, a lapse included. Read from the
HealthManager's threads: each word is one attribute, replaced whole.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kuryr_supervisor.netcheck.codecs import clusterspec
from kuryr_supervisor.netcheck.codecs.clusterspec import ClusterVerdict, NodeVerdict

LOG = logging.getLogger(__name__)

#: (judged, verdict, renewal text, when that renewal was first seen)
_Word = tuple[bool | None, ClusterVerdict, str, float]


class ClusterView:
    """See the module; ``clock`` is monotonic, ``wall`` epoch seconds."""

    def __init__(self, node: str, *,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.node = node
        self._clock, self._wall = clock, wall
        self._word: _Word = (None, ClusterVerdict(), "", 0.0)
        self._said = ""
        #: What :meth:`_vouched` last said (logged once per change).
        self._told: tuple[str, Any] = ("", None)

    @property
    def judged(self) -> bool | None:
        return self._word[0]

    @property
    def verdict(self) -> ClusterVerdict:
        """The judge's last word, standing or not."""
        return self._word[1]

    def take(self, obj: Mapping[str, Any] | None) -> None:
        """The record as someone just had it (None: there is none)."""
        try:
            found = clusterspec.verdict(obj, self.node)
        except ValueError as exc:
            if str(exc) != self._said:
                LOG.warning("cluster view: the judge's part of the record is "
                            "refused: %s", exc)
                self._said = str(exc)
            return
        self._said = ""
        self._set(False, ClusterVerdict()) if found is None \
            else self._set(True, found)

    def absent(self) -> None:
        """The API serves no NodeNetworks: no judge here."""
        self._set(False, ClusterVerdict())

    def _set(self, judged: bool, verdict: ClusterVerdict) -> None:
        judged_before, before, renewed, seen_at = self._word
        if verdict.renewed != renewed or not verdict.declares:
            renewed, seen_at = verdict.renewed, self._clock()
        if (judged, verdict.key()) != (judged_before, before.key()):
            LOG.info("the network judge says: %s", (
                "nothing (it does not judge this node)" if not judged else
                "; ".join(filter(None, (
                    f"cluster-wide fault ({verdict.fault}) since "
                    f"{verdict.since}" if verdict.fault
                    else "no cluster-wide fault",
                    f"this node's network is broken ({verdict.node.reason})"
                    if verdict.node is not None else "")))))
        self._word = (judged, verdict, renewed, seen_at)

    def standing(self) -> bool:
        """Whether the judge's declarations stand now (see the module)."""
        judged, verdict, _, seen_at = self._word
        if not judged:
            return False
        return clusterspec.standing(verdict, self._wall(),
                                    self._clock() - seen_at)

    def cluster_fault(self) -> str:
        """The kind of the cluster-wide fault declared and standing ("":
        none)."""
        return self._vouched()[0]

    def node_fault(self) -> NodeVerdict | None:
        """The judge's standing verdict that this node's network is broken
        (None: it holds none)."""
        return self._vouched()[1]

    def _vouched(self) -> tuple[str, NodeVerdict | None]:
        verdict, standing = self.verdict, self.standing()
        now = (verdict.fault, verdict.node) if standing else ("", None)
        told, self._told = self._told, now
        if now == told:
            return now
        if verdict.declares and not standing:
            LOG.warning("the network judge's verdict lapsed (last renewed %s, "
                        "for %gs): this node judges alone again",
                        verdict.renewed or "never", verdict.lifetime)
        elif now[1] is not None and (told[1] is None or
                                     told[1].reason != now[1].reason):
            LOG.warning("the network judge holds this node's network broken: "
                        "%s: %s", now[1].reason, now[1].message)
        elif now[1] is None and told[1] is not None:
            LOG.info("the network judge no longer holds this node's network "
                     "broken")
        return now
