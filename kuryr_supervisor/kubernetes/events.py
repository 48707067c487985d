"""Kubernetes Events on this Node, recorded the way client-go's recorder does.

``kubectl describe node`` shows what happened to kuryr-supervisor on the node
(a worker restarted, a budget exhausted, readiness lost or regained, an
environment fault) next to the kubelet's own events. Three rules keep a crash
loop from flooding the API, as in client-go's ``EventCorrelator``:

* **aggregation**: notes with the same key (type, reason and the caller's
  ``key``, e.g. the worker and its cause -- not the message, whose figures
  change every time) are one Event: the first is created (POST), each repeat
  PATCHes its ``count``, ``lastTimestamp`` and ``message``;
* **spam filter**: a token bucket per key (client-go's defaults: a burst of
  25, then one every 5 minutes); a filtered repeat is still counted, so the
  next patch that passes carries the true count;
* **never block the caller**: :meth:`EventRecorder.record` puts the note on a
  bounded queue and returns; one background thread posts; a full queue drops
  the note and counts it.

Events of a cluster-scoped object live in the ``default`` namespace; the
involved object's ``uid`` is the node's name, as the kubelet's are (``kubectl
describe node`` finds both). A note names this node by default, or any
:class:`Subject` (the controller's network judge tells of other nodes and
of the cluster). An Event the API has expired (its TTL, 1 h by
default) is created again on the next repeat.
"""
from __future__ import annotations

import collections
import dataclasses
import datetime
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kuryr_supervisor.kubernetes.resource import STRATEGIC_MERGE_PATCH, ResourceClient
from kuryr_supervisor.kubernetes.wire import K8sPermanent

LOG = logging.getLogger(__name__)

SOURCE = "kuryr-supervisor"
NAMESPACE = "default"
MAX_MESSAGE = 1024
BURST = 25                   # client-go's spam filter defaults
REFILL_PER_SECOND = 1 / 300
CACHE_SIZE = 4096
QUEUE_SIZE = 256

Clock = Callable[[], float]
Create = Callable[[str, Mapping[str, Any]], Any]
Patch = Callable[[str, str, Mapping[str, Any]], Any]


@dataclasses.dataclass(frozen=True)
class Subject:
    """The object an Event is about (``involvedObject``): a Node (its
    ``uid`` the name, as the kubelet's) or any other object."""

    kind: str
    name: str
    namespace: str = ""
    api_version: str = "v1"
    #: The object's UID (``kubectl describe`` finds its Events by it);
    #: a Node's is its name.
    uid: str = ""

    def reference(self) -> dict[str, str]:
        ref = {"apiVersion": self.api_version, "kind": self.kind,
               "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        elif self.kind == "Node":
            ref["uid"] = self.name
        return ref


@dataclasses.dataclass(frozen=True)
class Note:
    """One thing worth an Event. ``key`` says which notes are the same Event
    (empty: the reason alone); ``subject`` what it is about (None: the
    recorder's own Node)."""

    type: str            # "Normal" or "Warning"
    reason: str          # CamelCase, e.g. WorkerRestarted
    message: str
    key: str = ""
    subject: Subject | None = None

    @property
    def identity(self) -> tuple[str, str, str, Subject | None]:
        return self.type, self.reason, self.key, self.subject


def rfc3339(wall: float) -> str:
    return datetime.datetime.fromtimestamp(wall, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


class TokenBucket:
    """``burst`` tokens, refilled at ``rate`` per second."""

    def __init__(self, burst: int, rate: float, now: float) -> None:
        self.burst, self.rate = burst, rate
        self.tokens = float(burst)
        self.at = now

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclasses.dataclass
class _Seen:
    count: int
    first: float
    name: str | None          # None until the API has the Event
    bucket: TokenBucket


class Correlator:
    """Notes in, API requests out: ``("create", body)``, ``("patch", name,
    patch)`` or None (spam-filtered). Pure but for the injected clock."""

    def __init__(self, node: str, *, burst: int = BURST,
                 rate: float = REFILL_PER_SECOND, cache_size: int = CACHE_SIZE,
                 wall: Clock = time.time) -> None:
        self.node = node
        self.burst, self.rate = burst, rate
        self._wall = wall
        self._size = cache_size
        self._seen: collections.OrderedDict[
            tuple[str, str, str, Subject | None], _Seen] = \
            collections.OrderedDict()
        self.filtered = 0

    def observe(self, note: Note) -> tuple[Any, ...] | None:
        now = self._wall()
        seen = self._seen.get(note.identity)
        if seen is None:
            seen = _Seen(0, now, None, TokenBucket(self.burst, self.rate, now))
            self._seen[note.identity] = seen
            while len(self._seen) > self._size:
                self._seen.popitem(last=False)
        self._seen.move_to_end(note.identity)
        seen.count += 1
        if not seen.bucket.take(now):
            self.filtered += 1
            return None
        message = note.message[:MAX_MESSAGE]
        if seen.name is None:
            return ("create", self.body(note, seen, message, now))
        return ("patch", seen.name, {"count": seen.count, "message": message,
                                     "lastTimestamp": rfc3339(now)})

    def created(self, note: Note, name: str) -> None:
        seen = self._seen.get(note.identity)
        if seen is not None:
            seen.name = name

    @staticmethod
    def namespace(note: Note) -> str:
        """Where the note's Event lives: its subject's namespace, or
        ``default`` for a cluster-scoped subject (a Node)."""
        return (note.subject.namespace if note.subject is not None
                and note.subject.namespace else NAMESPACE)

    def expired(self, note: Note) -> dict[str, Any]:
        """The API no longer has the Event: a create carrying the count."""
        seen = self._seen[note.identity]
        seen.name = None
        return self.body(note, seen, note.message[:MAX_MESSAGE], self._wall())

    def body(self, note: Note, seen: _Seen, message: str,
             now: float) -> dict[str, Any]:
        subject = note.subject or Subject("Node", self.node)
        name = f"{subject.name}.{time.time_ns():x}"[:253]
        return {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": self.namespace(note)},
            "involvedObject": subject.reference(),
            "type": note.type, "reason": note.reason, "message": message,
            "source": {"component": SOURCE, "host": self.node},
            "reportingComponent": SOURCE,
            "reportingInstance": f"{SOURCE}-{self.node}"[:128],
            "count": seen.count, "firstTimestamp": rfc3339(seen.first),
            "lastTimestamp": rfc3339(now)}


class EventRecorder:
    """A bounded queue of notes and the thread that posts them."""

    def __init__(self, create: Create, patch: Patch, node: str, *,
                 queue_size: int = QUEUE_SIZE,
                 correlator: Correlator | None = None) -> None:
        self._create, self._patch = create, patch
        self.correlator = correlator or Correlator(node)
        self._queue: queue.Queue[Note | None] = queue.Queue(queue_size)
        self._thread: threading.Thread | None = None
        self.dropped = self.posted = self.failed = 0
        self._failing = False

    def record(self, note: Note) -> bool:
        """Queue ``note``; never blocks. False (and counted) when full."""
        try:
            self._queue.put_nowait(note)
        except queue.Full:
            if not self.dropped:
                LOG.warning("node event queue full: dropping events")
            self.dropped += 1
            return False
        return True

    def start(self) -> EventRecorder:
        self._thread = threading.Thread(target=self._run, name="node-events",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 1.0) -> None:
        """Post what is queued within ``timeout``, then end the thread."""
        if self._thread is None:
            return
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            pass
        self._thread.join(timeout)
        self._thread = None

    def _run(self) -> None:
        while True:
            note = self._queue.get()
            if note is None:
                return
            self.send(note)

    def send(self, note: Note) -> None:
        """Post one note now (the thread's body; tests call it directly)."""
        request = self.correlator.observe(note)
        if request is None:
            return
        try:
            if request[0] == "create":
                self._post(note, request[1])
            else:
                try:
                    self._patch(self.correlator.namespace(note), request[1],
                                request[2])
                except K8sPermanent as exc:
                    if exc.status != 404:
                        raise
                    self._post(note, self.correlator.expired(note))
        except Exception as exc:  # noqa: BLE001 - an event is never fatal
            self.failed += 1
            if not self._failing:
                LOG.warning("cannot post node event %s: %s", note.reason, exc)
            self._failing = True
            return
        if self._failing:
            LOG.info("posting node events again")
        self._failing = False
        self.posted += 1

    def _post(self, note: Note, body: Mapping[str, Any]) -> None:
        self._create(body["metadata"]["namespace"], body)
        self.correlator.created(note, body["metadata"]["name"])


def posting(events: ResourceClient) -> tuple[Create, Patch]:
    """(create, patch) of core/v1 Events through the generic client: a
    repeated Event is patched (strategic merge: count, lastTimestamp,
    message)."""
    def create(namespace: str, body: Mapping[str, Any]) -> Any:
        return events.create(body, namespace=namespace)

    def patch(namespace: str, name: str, body: Mapping[str, Any]) -> Any:
        return events.patch(name, body, namespace=namespace,
                             content_type=STRATEGIC_MERGE_PATCH)
    return create, patch


def recorder(client: Any, **kwargs: Any) -> EventRecorder:
    """A recorder posting through a :class:`~.client.K8sClient`
    (``kwargs``: :class:`EventRecorder`'s)."""
    return EventRecorder(*posting(client.events), client.node, **kwargs)
