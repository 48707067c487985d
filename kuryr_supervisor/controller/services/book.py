"""The Services and their EndpointSlices as the watches say, and which
Services changed since the handler last looked.

Two informers write here (the Services' in the handler's loop, the
EndpointSlices' in a thread of its own), the handler reads: every method
holds the book's lock. A change of a Service, or of a slice of it, marks
the Service *dirty* (:meth:`ServiceBook.take`); so does its deletion (its
UID stays dirty with no Service: its load balancer is to go). A relist
marks what it changed, added or removed, nothing else.

:class:`ServiceSink` and :class:`SliceSink` are the informers' sinks.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable

from kuryr_supervisor.kubernetes.services import EndpointSlice, Service

Key = tuple[str, str]


class ServiceBook:
    """See the module."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._services: dict[str, Service] = {}
        self._uids: dict[Key, str] = {}
        #: (namespace, service name) -> slice (namespace/name) -> slice
        self._slices: dict[Key, dict[str, EndpointSlice]] = {}
        self._dirty: set[str] = set()
        #: UIDs of Services the watch saw go (their load balancers go
        #: without another read: the watch said so)
        self._deleted: set[str] = set()
        self.services_synced = False
        self.slices_synced = False

    @property
    def synced(self) -> bool:
        """Both watches have listed once."""
        return self.services_synced and self.slices_synced

    # -- reading -------------------------------------------------------------
    def take(self) -> set[str]:
        """The UIDs marked since the last take (no longer marked)."""
        with self._lock:
            out, self._dirty = self._dirty, set()
        return out

    def mark(self, uids: Iterable[str]) -> None:
        with self._lock:
            self._dirty.update(uids)

    def dirty(self) -> int:
        with self._lock:
            return len(self._dirty)

    def uids(self) -> set[str]:
        with self._lock:
            return set(self._services)

    def get(self, uid: str) -> tuple[Service, list[EndpointSlice]] | None:
        """The Service and its slices (None: no such Service)."""
        with self._lock:
            svc = self._services.get(uid)
            if svc is None:
                return None
            return svc, list(self._slices.get(svc.key, {}).values())

    # -- the Services' watch -----------------------------------------------------
    def put_service(self, svc: Service) -> None:
        with self._lock:
            if self._services.get(svc.uid) != svc:
                self._dirty.add(svc.uid)
            self._services[svc.uid] = svc
            self._uids[svc.key] = svc.uid

    def drop_service(self, svc: Service) -> None:
        with self._lock:
            self._forget(svc.uid)

    def _forget(self, uid: str) -> None:
        old = self._services.pop(uid, None)
        if old is not None and self._uids.get(old.key) == uid:
            del self._uids[old.key]
        if old is not None:
            self._deleted.add(uid)
        self._dirty.add(uid)

    def deleted(self, uid: str) -> bool:
        """Whether the watch saw Service ``uid`` go (a delete, or a relist
        from a version not older than one it was in: never a first list,
        which forgets nothing)."""
        with self._lock:
            return uid in self._deleted

    def settled(self, uid: str) -> None:
        """Service ``uid``'s deletion is done with (its load balancer
        gone): no longer remembered."""
        with self._lock:
            self._deleted.discard(uid)

    def replace_services(self, services: Iterable[Service]) -> None:
        listed = {s.uid: s for s in services}
        with self._lock:
            for uid in set(self._services) - set(listed):
                self._forget(uid)
        for svc in listed.values():
            self.put_service(svc)
        self.services_synced = True

    # -- the EndpointSlices' watch -------------------------------------------------
    def _touched(self, key: Key) -> None:
        uid = self._uids.get(key)
        if uid is not None:
            self._dirty.add(uid)

    def put_slice(self, item: EndpointSlice) -> None:
        with self._lock:
            mine = self._slices.setdefault(item.key, {})
            name = f"{item.namespace}/{item.name}"
            if mine.get(name) != item:
                mine[name] = item
                self._touched(item.key)

    def drop_slice(self, item: EndpointSlice) -> None:
        with self._lock:
            mine = self._slices.get(item.key, {})
            if mine.pop(f"{item.namespace}/{item.name}", None) is not None:
                self._touched(item.key)
            if not mine:
                self._slices.pop(item.key, None)

    def replace_slices(self, slices: Iterable[EndpointSlice]) -> None:
        fresh: dict[Key, dict[str, EndpointSlice]] = {}
        for item in slices:
            fresh.setdefault(item.key, {})[
                f"{item.namespace}/{item.name}"] = item
        with self._lock:
            for key in set(self._slices) | set(fresh):
                if self._slices.get(key) != fresh.get(key):
                    self._touched(key)
            self._slices = fresh
        self.slices_synced = True


class ServiceSink:
    """The Services' informer's sink."""

    def __init__(self, book: ServiceBook) -> None:
        self.book = book

    def replace_all(self, items: Iterable[Service],
                    resource_version: str) -> None:
        self.book.replace_services(items)

    def upsert(self, item: Service) -> None:
        self.book.put_service(item)

    def delete(self, item: Service) -> None:
        self.book.drop_service(item)


class SliceSink:
    """The EndpointSlices' informer's sink."""

    def __init__(self, book: ServiceBook) -> None:
        self.book = book

    def replace_all(self, items: Iterable[EndpointSlice],
                    resource_version: str) -> None:
        self.book.replace_slices(items)

    def upsert(self, item: EndpointSlice) -> None:
        self.book.put_slice(item)

    def delete(self, item: EndpointSlice) -> None:
        self.book.drop_slice(item)
