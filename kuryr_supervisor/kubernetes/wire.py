"""The Kubernetes API on the wire: the error taxonomy, the decoding of
pods into the few fields the daemon uses, and watch streams of any
object, each decoded by the caller's function.

Kept apart from :mod:`.resource` and :mod:`.transport` (requests) so
that the watch loop and its tests speak of events and errors without the
transport, and so a change of the API's JSON touches this module only.

Every failure leaves this module as one of :class:`K8sGone`,
:class:`K8sTemporary` or :class:`K8sPermanent`, chained to its cause.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from kuryr_supervisor.kubernetes.registry import Pod

if TYPE_CHECKING:
    import urllib3

LOG = logging.getLogger(__name__)

T = TypeVar("T")


class K8sError(Exception):
    """Base of the adapter's errors; ``status`` is the HTTP status or 0."""

    def __init__(self, msg: str, status: int = 0) -> None:
        super().__init__(msg)
        self.status = status


class K8sGone(K8sError):
    """410: the resourceVersion is too old; relist."""


class K8sTemporary(K8sError):
    """5xx, 429, timeouts, connection errors: retry with backoff."""


class K8sPermanent(K8sError):
    """Other 4xx (RBAC, bad request): retrying the same call cannot help."""


def from_status(status: int, msg: str) -> K8sError:
    if status == 410:
        return K8sGone(msg, status)
    if status >= 500 or status in (408, 429) or status == 0:
        return K8sTemporary(msg, status)
    return K8sPermanent(msg, status)



@dataclasses.dataclass(frozen=True)
class LeaseRecord:
    """A coordination.k8s.io/v1 Lease, as leader election reads it."""

    holder: str
    renew_time: float          # epoch seconds; 0 when never renewed
    duration: int              # leaseDurationSeconds
    transitions: int
    resource_version: str
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)


def pod_from_json(obj: Mapping[str, Any]) -> Pod:
    meta = obj.get("metadata") or {}
    return Pod(namespace=meta.get("namespace", ""), name=meta.get("name", ""),
               uid=meta.get("uid", ""),
               deletion_timestamp=meta.get("deletionTimestamp"))


@dataclasses.dataclass(frozen=True)
class WatchEvent(Generic[T]):
    """One watch event: ADDED, MODIFIED, DELETED or BOOKMARK (whose
    ``obj`` is None), its object decoded."""

    type: str
    obj: T | None
    resource_version: str


def parse_event(line: bytes, decode: Callable[[Mapping[str, Any]], T]
                ) -> WatchEvent[T]:
    """Decode one watch line; an ERROR event is raised as its taxonomy."""
    try:
        raw = json.loads(line)
        kind, obj = raw["type"], raw.get("object") or {}
    except (ValueError, KeyError, TypeError) as exc:
        raise K8sTemporary(f"undecodable watch event: {line[:200]!r}") from exc
    if kind == "ERROR":
        raise from_status(int(obj.get("code") or 0),
                           f"watch error: {obj.get('message', obj)}")
    rv = (obj.get("metadata") or {}).get("resourceVersion", "")
    return WatchEvent(kind, None if kind == "BOOKMARK" else decode(obj), rv)


class WatchStream(Generic[T]):
    """An open watch; iterate for events (each object decoded with
    ``decode``), ``close()`` from any thread.

    The response is finished once, by whoever comes last: the reader when
    the stream ends, breaks or is abandoned, or ``close()`` when nobody is
    reading. Its connection goes back to the pool only when the server
    ended the response and nobody closed it; otherwise it is closed first,
    so a half-read connection is never reused. ``close()`` while a reader
    is blocked in another thread shuts the socket down for reading, which
    wakes it, and leaves the rest to it; closing a stream that finished,
    was released or was closed already does nothing. None of it is an
    error, and none of it is logged.
    """

    def __init__(self, response: urllib3.HTTPResponse,
                 decode: Callable[[Mapping[str, Any]], T]) -> None:
        self._response = response
        self._decode = decode
        self._closed = threading.Event()
        # Reentrant: a generator finalised by the collector may run its
        # finally in a thread that holds the lock already.
        self._lock = threading.RLock()
        self._reading = False
        self._finished = False

    def __iter__(self) -> Iterator[WatchEvent[T]]:
        import urllib3  # Kubernetes mode only: standalone never needs it
        with self._lock:
            if self._finished or self._reading:
                return
            self._reading = True
        buf = b""
        complete = False
        try:
            for chunk in self._response.stream(65536, decode_content=True):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield parse_event(line, self._decode)
            complete = True
        except Exception as exc:
            if self._closed.is_set():
                return              # closed under us: how the read ended is moot
            if isinstance(exc, (urllib3.exceptions.HTTPError, OSError)):
                raise K8sTemporary(f"watch stream broken: {exc}") from exc
            raise
        finally:
            with self._lock:
                self._reading = False
                self._finish(complete and not self._closed.is_set())

    def _finish(self, clean: bool) -> None:
        """Once, under the lock: a connection not read to its end (or one
        closed under its reader) is closed before it goes back."""
        if self._finished:
            return
        self._finished = True
        if not clean:
            self._response.close()
        self._response.release_conn()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            if self._finished:
                return
            if not self._reading:
                self._finish(clean=False)
                return
            try:
                # The reader still holds the connection (it releases it
                # under this lock): wake it from its blocking read.
                self._response.shutdown()
            except (OSError, ValueError, RuntimeError):
                pass                # already down: the reader ends anyway
