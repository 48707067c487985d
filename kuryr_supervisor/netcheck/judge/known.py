"""Which records belong to a Node that exists: the judge and the canaries
count no other.

Any node's daemon may create a NodeNetwork record (RBAC cannot hold each
node to its own name), and a daemon run under a name that is no Node
makes one too. Judged, such records could outvote the real nodes (four
records named after no Node, each failing a check, made a "cluster-wide
fault" of 5 of 7 that excused every real node's STATUS), witness against a
healthy node's canary, or have a canary port made for each (the project's
port quota drained). So a record counts only when a Node of its name
exists.

:class:`KnownNodes` keeps the names of the Nodes: a whole list when its
owner lists them anyway (the judge, :meth:`listed`) or when it asks for one
(the canaries, :meth:`load`), and, for a record whose name is not among
them, one GET of that Node (a Node that joined since the list): at most
:data:`LOOKUPS_PER_PASS` a pass, a name found to be no Node asked again
only after :data:`RETRY` seconds, and said once (WARNING) until it is a
Node or its record is gone. A GET on miss, not a watch of every Node: the
Nodes change far more often than names appear, and a watch of them would
cost every controller their whole objects on every status update.

A Node deleted is dropped at the next list (its record, owned by the
Node, is deleted by the garbage collector meanwhile).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from kuryr_supervisor.kubernetes.resource import ResourceClient
from kuryr_supervisor.kubernetes.wire import K8sError

LOG = logging.getLogger(__name__)

PAGE_SIZE = 500
#: Node GETs for unknown names in one pass at most.
LOOKUPS_PER_PASS = 10
#: Seconds before a name found to be no Node is asked again.
RETRY = 60.0


class NodeLookup(Protocol):
    """What it needs of the API (``K8sClient`` fits)."""

    @property
    def nodes(self) -> ResourceClient: ...


class KnownNodes:
    """See the module; ``clock`` is monotonic seconds."""

    def __init__(self, calls: NodeLookup, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.calls, self._clock = calls, clock
        self.names: set[str] = set()
        #: name -> when it was last found to be no Node
        self._missing: dict[str, float] = {}
        self.lookups = 0

    def listed(self, names: Iterable[str]) -> None:
        """Every Node's name, from a whole list."""
        self.names = {n for n in names if n}
        for name in self.names & set(self._missing):
            self._found(name)

    def load(self, beat: Callable[[], None] = lambda: None) -> None:
        """List every Node's name (raises the API's error)."""
        found: list[str] = []
        token = ""
        while True:
            page, _, token = self.calls.nodes.page(limit=PAGE_SIZE,
                                                   token=token)
            found += [str((n.get("metadata") or {}).get("name") or "")
                      for n in page]
            beat()
            if not token:
                break
        self.listed(found)

    def existing(self, names: Iterable[str]) -> set[str]:
        """Those of ``names`` that are Nodes: the known ones, and the
        unknown ones a GET finds (see the module)."""
        wanted = set(names)
        now = self._clock()
        for name in set(self._missing) - wanted:
            del self._missing[name]         # its record is gone: forgotten
        asked = 0
        for name in sorted(wanted - self.names):
            missed = self._missing.get(name)
            if asked >= LOOKUPS_PER_PASS or (
                    missed is not None and now - missed < RETRY):
                continue
            asked += 1
            self.lookups += 1
            try:
                node = self.calls.nodes.get(name)
            except K8sError as exc:
                LOG.debug("cannot tell whether Node %s exists: %s", name, exc)
                break                       # an outage: the next pass
            if node is not None:
                self.names.add(name)
                if missed is not None:
                    self._found(name)
                continue
            if missed is None:
                LOG.warning("NodeNetwork record %s names no Node: ignored "
                            "(not judged, no canary, its probes not "
                            "counted)", name[:253])
            self._missing[name] = now
        return wanted & self.names

    def _found(self, name: str) -> None:
        del self._missing[name]
        LOG.info("NodeNetwork record %s now names a Node: counted", name)
