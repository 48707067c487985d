"""The informer: one list+watch loop, generic over the objects it follows.

An :class:`Informer` lists what its :class:`Source` serves, then watches
from the list's resourceVersion, and hands every object to its
:class:`Sink`; the same engine follows this node's pods (the Watcher),
every pod of the cluster (the port handler), the NodeNetwork records (the
network judge, the canaries, a node's own record) and a node's PodPorts.
A source decodes the objects (a pod into a slotted record, a record left
as its JSON), so the loop never looks inside one.

The loop lists, then watches from the list's resourceVersion; every event
and bookmark moves the resourceVersion on, so a watch that ends or breaks
resumes where it left off. 410 Gone means the version was compacted away:
relist after a short random pause. Other errors back off exponentially up to
a cap, so an API outage never becomes a hot loop.
The first complete list makes the loop *synced*.

At fleet scale the API server is shared, so nodes must not move in step:

- every wait has jitter ("equal jitter": between half and all of the
  exponential delay), so watchers that failed together when the API went
  down do not all come back at the same instant;
- the cheapest correct relist, as client-go's reflector does it: the first
  list takes any version from the API server's watch cache
  (``resourceVersion=0``), a relist asks the cache for a version not older
  than the last one seen (``NotOlderThan``: never back in time), and only a
  list refused with 410 falls back to a consistent read from etcd. A stale
  answer is safe: the watch that follows brings every change since, and
  "pod gone" decisions are confirmed with a GET (``PodChecker``,
  ``confirm_gone``).

Heartbeats: the watch is opened and its stream read by a pump thread into
a queue, and the loop itself waits on the queue for at most one heartbeat
interval, so it beats while the watch is idle or its request unanswered (an
API server that accepts and never answers); sooner when ``wake_in`` asks (a sink holding work
until a deadline, e.g. the controller's port batch: the heartbeat callback
is its chance to do it). Only the loop beats, never the pump: if the loop
hangs, heartbeats stop and the supervisor sees it. A pump silent for longer
than the watch can legitimately be (``stall_timeout``) is abandoned.

Invariant: an error while applying one object is logged and skipped; it
never stops the loop nor loses the resourceVersion.
"""
from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from kuryr_supervisor.kubernetes.wire import (
    K8sError,
    K8sGone,
    K8sPermanent,
    K8sTemporary,
    WatchEvent,
)

LOG = logging.getLogger(__name__)

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)

_END = object()
_FOREVER = float("inf")
#: A watch that ends sooner than this without any event is not reopened at once.
_MIN_EMPTY_WATCH = 1.0


class Stream(Protocol[T]):
    """An open watch (:class:`~.wire.WatchStream` fits)."""

    def __iter__(self) -> Iterator[WatchEvent[T]]: ...
    def close(self) -> None: ...


class Source(Protocol[T]):
    """What the loop lists and watches (:class:`~.listing.Listing` fits):
    the objects decoded, and the list's resourceVersion."""

    def list(self, resource_version: str = "") -> tuple[Sequence[T], str]: ...
    def watch(self, resource_version: str) -> Stream[T]: ...


class Sink(Protocol[T_contra]):
    """Where the objects go (a registry, a book, whatever reacts)."""

    def replace_all(self, items: Iterable[T_contra],
                    resource_version: str) -> None: ...
    def upsert(self, item: T_contra) -> None: ...
    def delete(self, item: T_contra) -> None: ...


class Informer(Generic[T]):
    """List, then watch, forever; see the module docstring."""

    def __init__(self, source: Source[T], sink: Sink[T], *,
                 heartbeat: Callable[[], None] = lambda: None,
                 heartbeat_interval: float = 0.5,
                 backoff_initial: float = 0.5, backoff_max: float = 30.0,
                 stall_timeout: float = 90.0,
                 on_synced: Callable[[], None] = lambda: None,
                 on_relist: Callable[[], None] = lambda: None,
                 on_error: Callable[[str], None] = lambda kind: None,
                 rng: random.Random | None = None,
                 cache_relist: bool = True,
                 wake_in: Callable[[], float] = lambda: _FOREVER,
                 what: str = "pod") -> None:
        """``on_relist`` hears of every complete list, ``on_error`` of every
        failed list or watch by kind (gone, temporary, permanent, other):
        the Watcher counts them for ``/metrics``. ``rng`` and
        ``cache_relist`` are hooks for tests and the fleet benchmark
        (``cache_relist=False``: every list a consistent read); ``what``
        names what is watched in the log ("pod", "NodeNetwork")."""
        self.source, self.sink = source, sink
        self.on_relist, self.on_error = on_relist, on_error
        self.heartbeat, self.heartbeat_interval = heartbeat, heartbeat_interval
        self.backoff_initial, self.backoff_max = backoff_initial, backoff_max
        self.stall_timeout = stall_timeout
        self.on_synced = on_synced
        self.wake_in = wake_in
        self.resource_version: str | None = None    # None: (re)list next
        self.synced = False
        self.failures = 0
        self._failing = False
        self.rng = rng or random.Random()
        self.cache_relist = cache_relist
        self._last_seen = ""       # newest resourceVersion seen, for relists
        self._list_expired = False  # the last list was refused with 410
        self.what = what

    def list_version(self) -> str:
        """The resourceVersion the next list asks for (see the module doc)."""
        if not self.cache_relist or self._list_expired:
            return ""
        return self._last_seen or "0"

    def jittered(self, delay: float) -> float:
        """``delay`` spread over [delay/2, delay]: still growing, never in step."""
        return self.rng.uniform(delay / 2, delay)

    # -- steps -------------------------------------------------------------------
    def relist(self) -> None:
        try:
            items, rv = self.source.list(self.list_version())
        except K8sGone:
            self._list_expired = True       # next time: a consistent read
            raise
        self._list_expired = False
        self.sink.replace_all(items, rv)
        self.resource_version = self._last_seen = rv
        self.on_relist()
        if not self.synced:
            self.synced = True
            LOG.info("%s watch synced: %d listed", self.what, len(items))
            self.on_synced()
        else:
            LOG.debug("%s watch relisted %d at %s", self.what, len(items), rv)

    def apply(self, event: WatchEvent[T]) -> None:
        """Apply one event; a failing object is skipped, the RV still moves."""
        obj = event.obj
        try:
            if obj is not None and event.type in ("ADDED", "MODIFIED"):
                self.sink.upsert(obj)
            elif obj is not None and event.type == "DELETED":
                self.sink.delete(obj)
        except Exception:  # noqa: BLE001 - one bad object never stops the loop
            LOG.exception("skipping %s event of %s %s", event.type, self.what,
                          named(obj))
        if event.resource_version:
            self.resource_version = self._last_seen = event.resource_version

    def watch(self, stopping: threading.Event) -> int:
        """Follow one watch request to its end, beating while idle; returns
        how many events it brought."""
        version = self.resource_version
        assert version is not None
        stream: _Opened[T] = _Opened()
        events: queue.Queue[object] = queue.Queue()
        pump = threading.Thread(
            target=_pump, args=(lambda: self.source.watch(version),
                                stream, events),
            name="watch-pump", daemon=True)
        pump.start()
        silent_since = beaten = time.monotonic()
        count = 0
        try:
            while not stopping.is_set():
                wait = min(self.heartbeat_interval, max(0.0, self.wake_in()))
                try:
                    item = events.get(timeout=wait)
                except queue.Empty:
                    item = None
                now = time.monotonic()
                if item is None or now - beaten >= self.heartbeat_interval:
                    self.heartbeat()      # idle, or a long burst of events
                    beaten = now
                if item is None:
                    if now - silent_since > self.stall_timeout:
                        raise K8sTemporary("watch stalled")
                    continue
                silent_since = now
                if item is _END:
                    return count
                if isinstance(item, BaseException):
                    raise item
                assert isinstance(item, WatchEvent)
                self.apply(item)
                count += 1
                self._recovered()
        finally:
            stream.close()
        return count

    def step(self, stopping: threading.Event) -> float:
        """One list or watch; returns how long to wait before the next."""
        started = time.monotonic()
        try:
            if self.resource_version is None:
                self.relist()
            elif self.watch(stopping) == 0 and \
                    time.monotonic() - started < _MIN_EMPTY_WATCH:
                # no hot loop on empty watches
                return self.jittered(self.backoff_initial)
        except K8sGone:
            self.on_error("gone")
            LOG.info("resourceVersion %s expired, relisting",
                     self.resource_version)
            self.resource_version = None
            return self.rng.uniform(0.0, self.backoff_initial)
        except Exception as exc:  # noqa: BLE001 - API or sink: back off, go on
            self.on_error(_error_kind(exc))
            if not isinstance(exc, K8sError):
                LOG.exception("%s watch step failed", self.what)
            self.failures += 1
            delay = self.jittered(min(
                self.backoff_max,
                self.backoff_initial * 2 ** min(self.failures - 1, 32)))
            if not self._failing:
                self._failing = True
                LOG.warning("Kubernetes API error, retrying with backoff: %s",
                            exc)
            else:
                LOG.debug("API error #%d, retry in %.1fs: %s", self.failures,
                          delay, exc)
            return delay
        self._recovered()
        return 0.0

    def _recovered(self) -> None:
        if self._failing:
            LOG.info("Kubernetes API reachable again after %d errors",
                     self.failures)
        self._failing = False
        self.failures = 0

    def wait(self, delay: float, stopping: threading.Event) -> None:
        """Sleep ``delay`` seconds, beating every heartbeat interval."""
        deadline = time.monotonic() + delay
        while not stopping.is_set():
            self.heartbeat()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            stopping.wait(min(left, self.heartbeat_interval))

    def run(self, stopping: threading.Event) -> None:
        while not stopping.is_set():
            self.wait(self.step(stopping), stopping)


def named(obj: Any) -> str:
    """``namespace/name`` (or ``name``) of a decoded object or of raw
    JSON, for the log."""
    if isinstance(obj, Mapping):
        meta = obj.get("metadata")
        namespace, name = (meta.get("namespace"), meta.get("name")) \
            if isinstance(meta, Mapping) else (None, None)
    else:
        namespace = getattr(obj, "namespace", None)
        name = getattr(obj, "name", None)
    if name is None:
        return repr(obj)[:100]
    return f"{namespace}/{name}" if namespace else str(name)


def _error_kind(exc: BaseException) -> str:
    if isinstance(exc, K8sTemporary):
        return "temporary"
    if isinstance(exc, K8sPermanent):
        return "permanent"
    return "other"


class _Opened(Generic[T]):
    """The pump's stream, once its request is answered; closing it before
    then makes the pump close it as soon as it is."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stream: Stream[T] | None = None
        self._closed = False

    def set(self, stream: Stream[T]) -> bool:
        """Keep ``stream``; False (and it is closed) if already given up."""
        with self._lock:
            if not self._closed:
                self._stream = stream
                return True
        stream.close()
        return False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()


def _pump(open_stream: Callable[[], Stream[T]], opened: _Opened[T],
          events: queue.Queue[object]) -> None:
    """Open the watch, then move its blocking stream into a queue: events,
    then _END or an error."""
    try:
        stream = open_stream()
        if not opened.set(stream):
            return
        for event in stream:
            events.put(event)
        events.put(_END)
    except BaseException as exc:  # noqa: BLE001 - handed to the loop
        events.put(exc)
