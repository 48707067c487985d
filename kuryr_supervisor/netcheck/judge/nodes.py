"""The judge's Node conditions: what each Node says, what the judge wants
it to say, and the writes in between.

:class:`NodeConditions` keeps each Node's conditions as last listed or
written (one list of every Node at start and every ``resync_interval``,
paged; never a GET per node per judgement), the judge's :class:`Want` per
node, and writes the difference (:func:`~kuryr_supervisor.netcheck.
codecs.conditions.changes`: only on a change of status or reason, our own
conditions only). A write is a strategic merge patch conditional on the
Node's resourceVersion: when the Node changed since it was read (409) it
is read again and written once more, so a condition another writer set
meanwhile is seen before ours goes over it. At most :data:`MAX_WRITES`
writes per call, beating between them; what is left is written on the
next call, what failed after a backoff of its own (2 s doubling to
:data:`BACKOFF_MAX`: a refusal, such as RBAC, never becomes a write per
judgement), said once.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from kuryr_supervisor.kubernetes.nodes import patch_conditions
from kuryr_supervisor.kubernetes.resource import ResourceClient
from kuryr_supervisor.kubernetes.wire import K8sError, K8sPermanent
from kuryr_supervisor.netcheck.codecs import conditions as nc
from kuryr_supervisor.netcheck.codecs.conditions import Want
from kuryr_supervisor.netcheck.codecs.record import epoch

LOG = logging.getLogger(__name__)

PAGE_SIZE = 500
MAX_WRITES = 50
#: Most seconds between two attempts to write one node's conditions.
BACKOFF_MAX = 60.0

Conditions = list[Mapping[str, Any]]


class NodeCalls(Protocol):
    """What it needs of the API (``K8sClient`` fits)."""

    @property
    def nodes(self) -> ResourceClient: ...


def _of(node: Mapping[str, Any]) -> tuple[str, Conditions, str]:
    meta = node.get("metadata") or {}
    return (str(meta.get("name") or ""),
            list((node.get("status") or {}).get("conditions") or []),
            str(meta.get("resourceVersion") or ""))


def _merged(conditions: Conditions, patch: Sequence[Mapping[str, Any]]
            ) -> Conditions:
    """``conditions`` with ``patch`` applied as the API merges it (by type)."""
    kinds = {c["type"] for c in patch}
    return [c for c in conditions if c.get("type") not in kinds] + [
        dict(c) for c in patch if c.get("$patch") != "delete"]


class NodeConditions:
    """See the module."""

    def __init__(self, calls: NodeCalls, own_type: str, *,
                 wall: Callable[[], float] = time.time,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.calls, self.own_type = calls, own_type
        self._wall, self._clock = wall, clock
        #: node -> (failed writes in a row, no attempt before this time)
        self._failed: dict[str, tuple[int, float]] = {}
        #: name -> (conditions, resourceVersion) as last read or written
        self.nodes: dict[str, tuple[Conditions, str]] = {}
        self.want: dict[str, Want] = {}
        self.writes = 0

    def release(self, names: Iterable[str]) -> None:
        """Only ``names``' conditions of ours are wanted, each released
        (uninstalling)."""
        self.want = {name: Want(nc.RELEASE) for name in names}

    # -- reading ---------------------------------------------------------------
    def load(self, beat: Callable[[], None] = lambda: None) -> None:
        """List every Node (raises the API's error)."""
        found: dict[str, tuple[Conditions, str]] = {}
        token = ""
        while True:
            page, _, token = self.calls.nodes.page(limit=PAGE_SIZE,
                                                   token=token)
            for node in page:
                name, conditions, rv = _of(node)
                if name:
                    found[name] = (conditions, rv)
            beat()
            if not token:
                break
        self.nodes = found
        for gone in set(self.want) - set(found):
            del self.want[gone]

    def faults(self) -> dict[str, tuple[str, str, float]]:
        """Nodes our own condition says are in a local fault:
        name -> (reason, message, seconds since its lastTransitionTime)."""
        out = {}
        now = self._wall()
        for name, (conditions, _) in self.nodes.items():
            own = nc.seeded_fault(conditions, self.own_type)
            if own is not None:
                since = epoch(own.get("lastTransitionTime"))
                out[name] = (str(own.get("reason")),
                             str(own.get("message") or ""),
                             max(0.0, now - since) if since else 0.0)
        return out

    def marked(self) -> set[str]:
        """Nodes carrying a condition of ours (released when not judged)."""
        out = set()
        for name, (conditions, _) in self.nodes.items():
            unavailable = nc.find(conditions, nc.NETWORK_UNAVAILABLE)
            if nc.find(conditions, self.own_type) is not None or (
                    unavailable is not None and nc.ours(unavailable)
                    and unavailable.get("status") == "True"):
                out.add(name)
        return out

    # -- writing ---------------------------------------------------------------
    def pending(self) -> list[str]:
        """Nodes whose conditions differ from what is wanted."""
        return sorted(name for name, want in self.want.items()
                      if name not in self.nodes or self._patch(name, want))

    def _patch(self, name: str, want: Want) -> list[dict[str, Any]]:
        conditions, _ = self.nodes.get(name, ([], ""))
        return nc.changes(conditions, want, own_type=self.own_type,
                          wall=self._wall())

    def flush(self, beat: Callable[[], None] = lambda: None) -> int:
        """Write what differs (at most :data:`MAX_WRITES`, none for a node
        whose last write failed until its backoff is over); the writes
        made."""
        made = 0
        now = self._clock()
        due = [n for n in self.pending()
               if self._failed.get(n, (0, 0.0))[1] <= now]
        for name in due[:MAX_WRITES]:
            beat()
            try:
                made += self._write(name)
            except K8sError as exc:
                count = self._failed.get(name, (0, 0.0))[0] + 1
                delay = min(BACKOFF_MAX, 2.0 ** count)
                self._failed[name] = (count, now + delay)
                log = LOG.warning if count == 1 else LOG.debug
                log("cannot write the network conditions of node %s (tried "
                    "again in %.0fs): %s", name, delay, exc)
                continue
            if self._failed.pop(name, None) is not None:
                LOG.info("network conditions of node %s written again", name)
        return made

    def _write(self, name: str) -> int:
        for attempt in (1, 2):
            if name not in self.nodes or attempt == 2:
                node = self.calls.nodes.get(name)
                if node is None:            # the Node is gone
                    self.nodes.pop(name, None)
                    self.want.pop(name, None)
                    return 0
                self.nodes[name] = _of(node)[1:]
            want = self.want[name]
            patch = self._patch(name, want)
            if not patch:
                return 0
            try:
                node = patch_conditions(
                    self.calls.nodes, name, patch,
                    resource_version=self.nodes[name][1])
            except K8sPermanent as exc:
                if exc.status not in (404, 409) or attempt == 2:
                    raise
                continue
            self.writes += 1
            self.nodes[name] = _of(node)[1:] if isinstance(node, Mapping) \
                else (_merged(self.nodes[name][0], patch), "")
            LOG.info("node %s: %s", name, ", ".join(
                f"{c['type']} {c.get('status', 'removed')}"
                f"{' (' + c['reason'] + ')' if c.get('reason') else ''}"
                for c in patch))
            return 1
        return 0
