"""Every node's NodeNetwork record, as the judge observed it.

:class:`RecordSource` is an :class:`~kuryr_supervisor.kubernetes.informer.
Informer` source over the records (list in pages, then watch), so the judge
shares the pods' resume, relist and backoff logic. :class:`RecordBook` is its
sink: the latest valid record of each node with the judge's own time of
the first observation of that version (:class:`~.judge.Seen`), and since
when the node's daemon has said it is not ready.

Invariants:

* a relist that brings a version already seen keeps its observation time:
  relisting never makes a silent node look fresh;
* a new version whose status is the one already seen (the controller
  wrote the spec: a canary, the cluster's verdict) keeps its observation
  time too: only the node's own write makes it fresh;
* a record that does not hold up (:func:`~kuryr_supervisor.netcheck.
  codecs.record.from_object`) is logged once per node and ignored: the last
  valid one stays, and goes stale if nothing valid follows;
* a deleted record is forgotten: the node is no longer judged;
* the peers the controller assigned the node (its spec's ``probe``,
  :mod:`~kuryr_supervisor.netcheck.codecs.canaryspec`) ride along
  (:attr:`~.judge.Seen.assigned`): only probes of them are evidence.

:meth:`RecordBook.wake_in` tells the watch loop to hand over at once when
something changed, so the judge looks at a record as soon as it arrives.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kuryr_supervisor.kubernetes.client import K8sClient
from kuryr_supervisor.kubernetes.listing import Listing
from kuryr_supervisor.netcheck.codecs import canaryspec
from kuryr_supervisor.netcheck.codecs.record import from_object
from kuryr_supervisor.netcheck.judge.judge import Seen

LOG = logging.getLogger(__name__)

PAGE_SIZE = 500

Raw = Mapping[str, Any]


def _identity(obj: Raw) -> Raw:
    return obj


class RecordSource(Listing[Raw]):
    """The informer's source over every NodeNetwork (their JSON)."""

    def __init__(self, client: K8sClient, *, page_size: int = PAGE_SIZE,
                 beat: Callable[[], None] = lambda: None) -> None:
        super().__init__(client.nodenetworks, _identity, page_size=page_size,
                         beat=beat)


class RecordBook:
    """The informer's sink; ``seen`` is what the judge reads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.seen: dict[str, Seen] = {}
        #: node -> its record as last listed or watched (what a write of
        #: the spec starts from: its resourceVersion, the rest of the spec)
        self.objects: dict[str, Raw] = {}
        self._invalid: set[str] = set()
        #: Something changed since the judge last looked.
        self.dirty = False

    def looked(self) -> None:
        """The judge has looked: nothing changed since."""
        self.dirty = False

    def wake_in(self) -> float:
        """Seconds until the judge should look (the informer's ``wake_in``):
        at once when something changed."""
        return 0.0 if self.dirty else math.inf

    def replace_all(self, objs: Iterable[Raw], resource_version: str) -> None:
        names = set()
        for obj in objs:
            name = self._take(obj)
            if name:
                names.add(name)
        for gone in set(self.seen) - names:
            self._forget(gone)

    def upsert(self, obj: Raw) -> None:
        self._take(obj)

    def delete(self, obj: Raw) -> None:
        self._forget(str((obj.get("metadata") or {}).get("name") or ""))

    def _forget(self, name: str) -> None:
        self.objects.pop(name, None)
        if self.seen.pop(name, None) is not None:
            LOG.info("NodeNetwork record of %s deleted: the node is no "
                     "longer judged", name)
            self.dirty = True
        self._invalid.discard(name)

    def _take(self, obj: Raw) -> str:
        """Fold one object in; its node's name ("" when not a record)."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        try:
            record = from_object(obj)
        except ValueError as exc:
            if name and name not in self._invalid:
                self._invalid.add(name)
                LOG.warning("NodeNetwork record of %s ignored: %s", name[:253],
                            exc)
            return name if name in self.seen else ""
        self._invalid.discard(name)
        old = self.seen.get(name)
        if old is not None and record.resource_version and \
                old.record.resource_version == record.resource_version:
            return name          # a relist of a version already seen
        before = self.objects.get(name)
        self.objects[name] = obj
        assigned = _assigned(obj, name)
        if old is not None and before is not None and \
                before.get("status") == obj.get("status"):
            # The spec changed (the controller's write), not the report.
            self.seen[name] = dataclasses.replace(old, record=record,
                                                  assigned=assigned)
            self.dirty |= assigned != old.assigned
            return name
        now = self._clock()
        ready = record.report.daemon.ready
        since = None if ready else (
            old.not_ready_since if old is not None and
            old.not_ready_since is not None else now)
        self.seen[name] = Seen(record, now, since, assigned)
        self.dirty = True
        return name


def _assigned(obj: Raw, node: str) -> frozenset[str]:
    """The peers the record's spec assigns ``node`` (none when the spec
    does not hold up)."""
    try:
        return frozenset(t.node for t in canaryspec.assignment(obj, node).peers)
    except ValueError:
        return frozenset()
