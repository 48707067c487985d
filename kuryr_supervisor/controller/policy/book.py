"""What the network_policy handler knows of the cluster: its
NetworkPolicies, pods, namespaces and nodes as the watches last said them,
read through the model (:mod:`.spec`: every field judged, nothing raises).

The nodes are watched, not read at a look: a node's own group (its
addresses, which its pods must keep admitting) is made as the node
registers, before the scheduler puts a pod on it, so the port handler
finds it made when it makes the first selected pod's port there.

Four watches (a thread each) write here; the handler's pass reads a
:class:`Snapshot` (one lock hold, no copy of the objects: they are
frozen). Every change marks the book (:attr:`PolicyBook.changed`) and
bumps its generation, so the pass that follows sees every change made
before it, and a change made during a pass makes another one; many
changes between two passes are one pass (nothing queues, whatever the
churn: the work is bounded by the cluster, not by its events). A change
the model does not see (a pod's or node's status heartbeat, an
annotation) leaves the book as it was and makes no pass.
"""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from kuryr_supervisor.controller.policy import spec
from kuryr_supervisor.controller.policy.spec import Namespace, Pod, Policy

T = TypeVar("T")
KINDS = ("NetworkPolicy", "Pod", "Namespace", "Node")


@dataclasses.dataclass(frozen=True)
class Snapshot:
    policies: tuple[Policy, ...]
    pods: tuple[Pod, ...]
    namespaces: tuple[Namespace, ...]
    #: pod (namespace, name) -> its UID (its port's device_id)
    uids: Mapping[tuple[str, str], str]
    generation: int
    #: node name -> its addresses (:func:`.spec.node`)
    nodes: Mapping[str, tuple[str, ...]] = dataclasses.field(
        default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Item(Generic[T]):
    """A decoded object: its key in the book, its UID, the model's view."""

    key: Any
    uid: str
    value: T
    #: A pod that ran to completion (``Succeeded``, ``Failed``): as if
    #: gone (its port is released, its address may be another pod's).
    finished: bool = False


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


def decode_policy(obj: Mapping[str, Any]) -> Item[Policy]:
    found = spec.policy(obj)
    return Item(found.uid, found.uid, found)


def decode_pod(obj: Mapping[str, Any]) -> Item[Pod]:
    found = spec.pod(obj)
    status = obj.get("status") if isinstance(obj, Mapping) else None
    phase = status.get("phase") if isinstance(status, Mapping) else None
    return Item(found.key, str(_meta(obj).get("uid") or ""), found,
                phase in ("Succeeded", "Failed"))


def decode_namespace(obj: Mapping[str, Any]) -> Item[Namespace]:
    found = spec.namespace(obj)
    return Item(found.name, str(_meta(obj).get("uid") or ""), found)


def decode_node(obj: Mapping[str, Any]) -> Item[tuple[str, ...]]:
    name, addresses = spec.node(obj)
    return Item(name, str(_meta(obj).get("uid") or ""), addresses)


class PolicyBook:
    """See the module."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.changed = threading.Event()
        self._stores: dict[str, dict[Any, Item[Any]]] = {k: {} for k in KINDS}
        self._synced: set[str] = set()
        self._generation = 0

    def _mark(self) -> None:
        self._generation += 1
        self.changed.set()

    def replace(self, kind: str, items: Iterable[Item[Any]]) -> None:
        with self._lock:
            self._stores[kind] = {i.key: i for i in items if not i.finished}
            self._synced.add(kind)
            self._mark()

    def upsert(self, kind: str, item: Item[Any]) -> None:
        with self._lock:
            store = self._stores[kind]
            if item.finished:
                if store.pop(item.key, None) is None:
                    return
            elif store.get(item.key) == item:
                return              # nothing the model reads changed
            else:
                store[item.key] = item
            self._mark()

    def delete(self, kind: str, item: Item[Any]) -> None:
        with self._lock:
            self._stores[kind].pop(item.key, None)
            self._mark()

    @property
    def synced(self) -> bool:
        """Every watch has listed once: the book is the whole cluster."""
        with self._lock:
            return self._synced >= set(KINDS)

    def snapshot(self) -> Snapshot:
        with self._lock:
            self.changed.clear()
            pods = self._stores["Pod"]
            return Snapshot(
                tuple(i.value for i in self._stores["NetworkPolicy"].values()),
                tuple(i.value for i in pods.values()),
                tuple(i.value for i in self._stores["Namespace"].values()),
                {k: i.uid for k, i in pods.items()}, self._generation,
                {k: i.value for k, i in self._stores["Node"].items()})

    def policy(self, uid: str) -> Policy | None:
        with self._lock:
            item = self._stores["NetworkPolicy"].get(uid)
            return None if item is None else item.value


class Sink:
    """An informer's sink into the book for one ``kind``."""

    def __init__(self, book: PolicyBook, kind: str) -> None:
        self.book, self.kind = book, kind

    def replace_all(self, items: Iterable[Item[Any]],
                    resource_version: str) -> None:
        self.book.replace(self.kind, items)

    def upsert(self, item: Item[Any]) -> None:
        self.book.upsert(self.kind, item)

    def delete(self, item: Item[Any]) -> None:
        self.book.delete(self.kind, item)


DECODERS: dict[str, Callable[[Mapping[str, Any]], Item[Any]]] = {
    "NetworkPolicy": decode_policy, "Pod": decode_pod,
    "Namespace": decode_namespace, "Node": decode_node}
