"""The node's own NodeNetwork record, followed with a watch: whatever the
controller writes into its spec reaches the node at once.

The spec carries what steers the node (:mod:`kuryr_supervisor.netcheck.
codecs.clusterspec`: the judge's verdicts and their renewals;
:mod:`kuryr_supervisor.netcheck.codecs.canaryspec`: its canary port and whom it
probes). Read by GETs, a verdict reached a node only at its next read: a
node the judge found cut off went on answering STATUS 0 for as long as its
reads were apart, and reading often enough would cost every node a GET a
second. A watch of the one record (``fieldSelector=metadata.name``, as the
kubelet watches its own Node) costs one idle connection per node and
brings each write of the spec, a renewal included, the moment it is made.

:class:`RecordFollower` runs an :class:`~kuryr_supervisor.kubernetes.
informer.Informer` (list, then watch, resume, relist on 410, jittered backoff) over
that record on a thread of its own and hands each version to ``seen``
(None when there is none: deleted, or not made yet; the record writer
makes it). A resource the API does not serve (the controller's CRD not
installed) is retried with the loop's backoff; the writer says so.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from kuryr_supervisor.kubernetes.informer import Informer
from kuryr_supervisor.kubernetes.resource import ResourceClient
from kuryr_supervisor.kubernetes.wire import WatchStream

Raw = Mapping[str, Any]
Seen = Callable[[Raw | None], None]


class RecordCalls(Protocol):
    """What it needs of the API (``K8sClient`` fits)."""

    @property
    def watch_read_timeout(self) -> float: ...
    @property
    def nodenetworks(self) -> ResourceClient: ...


def _identity(obj: Raw) -> Raw:
    return obj


class _OneRecord:
    """The informer's source and sink over one record."""

    def __init__(self, calls: RecordCalls, node: str, seen: Seen) -> None:
        self.records, self.node, self.seen = calls.nodenetworks, node, seen
        self.one = f"metadata.name={node}"

    def list(self, resource_version: str = "") -> tuple[Sequence[Raw], str]:
        page = self.records.page(resource_version=resource_version, limit=1,
                                 field_selector=self.one)
        return page.items, page.resource_version

    def watch(self, resource_version: str) -> WatchStream[Raw]:
        return self.records.watch(resource_version, _identity,
                                  field_selector=self.one)

    def _mine(self, obj: Raw) -> bool:
        return (obj.get("metadata") or {}).get("name") == self.node

    def replace_all(self, objs: Iterable[Raw], resource_version: str) -> None:
        found = [o for o in objs if self._mine(o)]
        self.seen(found[0] if found else None)

    def upsert(self, obj: Raw) -> None:
        if self._mine(obj):
            self.seen(obj)

    def delete(self, obj: Raw) -> None:
        if self._mine(obj):
            self.seen(None)


class RecordFollower:
    """See the module; :meth:`start` and :meth:`stop` as a
    :class:`~kuryr_supervisor.health.pollloop.PollLoop`'s."""

    def __init__(self, calls: RecordCalls, node: str, seen: Seen, *,
                 backoff_max: float = 30.0) -> None:
        one = _OneRecord(calls, node, seen)
        self.watch = Informer(
            one, one,
            heartbeat_interval=1.0, backoff_max=backoff_max,
            stall_timeout=calls.watch_read_timeout + 5.0,
            what="NodeNetwork record")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.watch.run,
                                        args=(self._stop,),
                                        name="node-record-watch", daemon=True)

    def start(self) -> RecordFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
