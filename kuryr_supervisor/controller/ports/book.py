"""What the port handler knows of its pods: one record per pod.

The handler (:mod:`.handler`) and its steps (:mod:`.provision`,
:mod:`.resync`, :mod:`.verify`, :mod:`.finished`) read and change these
together; all run in the handler's one thread, so the book needs no lock.
Each live pod has one :class:`PodRecord` (its UID, namespace, name, the
node its port is bound to while it needs one, its port, whether its
PodPort is written and what that PodPort names, until when a create whose
answer was lost may still commit, whether it finished): forgetting a pod
is dropping its record, nothing to keep in step. The record of a pod a
list lacks is kept apart while its PodPort names a port or a create of
its may still commit (:attr:`PodBook.lacking`: the list may lag, and its
port is no one's to delete or make again until a consistent read says the
pod is gone); what it names and its create's time come back with the pod
when it arrives. A finished pod (:mod:`.finished`) stays in the book, needing no
port, until it is deleted: it exists, so its ports are never a gone
pod's.

Memory: a record is a slotted object of nine references (no per-object
dict); the UID, namespace and name are the strings the pod list decoded,
shared, not copied.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

from kuryr_supervisor.controller.openstack import wire
from kuryr_supervisor.controller.ports.podports import Named


@dataclasses.dataclass(slots=True)
class PodRecord:
    """One pod of the book (see the module)."""

    uid: str
    namespace: str
    name: str
    #: The node its port is bound to, while it needs one ("": it needs
    #: none: host network, not scheduled, finished).
    node: str = ""
    #: Its port's id ("": none known).
    port_id: str = ""
    #: Its PodPort is written.
    written: bool = False
    #: What its written PodPort names (immutable once bound).
    named: Named | None = None
    #: Until when (the pace's clock) a create whose answer was lost may
    #: still commit (0: none).
    inflight: float = 0.0
    #: In a terminal phase (Succeeded, Failed): it needs no port, ever
    #: again (see :mod:`.finished`).
    finished: bool = False

    # What happens to a pod, each a change of its own record.
    def needs(self, node: str) -> None:
        """It needs a port, bound to ``node``."""
        self.node = node

    def took(self, port_id: str) -> None:
        """It holds port ``port_id`` from now on."""
        self.port_id = port_id

    def keeps(self, port_id: str) -> None:
        """It keeps port ``port_id``, which its written PodPort names."""
        self.port_id, self.written = port_id, True

    def adopts(self, port_id: str) -> None:
        """It holds port ``port_id``, whose PodPort is yet to write."""
        self.port_id, self.written = port_id, False

    def unwritten(self) -> None:
        """Its PodPort is to write (again)."""
        self.written = False

    def wrote(self) -> None:
        """Its PodPort is written."""
        self.written = True

    def names(self, named: Named | None) -> None:
        """Its PodPort names ``named`` (None: nothing, or it is gone)."""
        self.named = named

    def lost(self) -> None:
        """Its port is gone and it is not bound: a new port, a new
        PodPort."""
        self.named, self.written = None, False

    def waits(self, until: float) -> None:
        """A create of its port may commit until ``until`` (0: none)."""
        self.inflight = until

    def done(self) -> None:
        """It reached a terminal phase: it needs no port any more."""
        self.finished, self.written, self.node, self.port_id = \
            True, False, "", ""

    def needs_none(self) -> None:
        """It needs no port (finished, or gone): nothing is written or
        bound for it."""
        self.written, self.node = False, ""


class PodBook:
    """The handler's pods (see the module)."""

    def __init__(self) -> None:
        #: uid -> the record of every live pod
        self.pods: dict[str, PodRecord] = {}
        #: uid -> the record of a pod a list lacks, while its PodPort
        #: names a port or its create may still commit
        self.lacking: dict[str, PodRecord] = {}
        #: Neutron may hold ports the handler does not know of (a lost
        #: answer, or not listed yet): list before creating.
        self.uncertain = True
        #: The uids whose record may say a create may still commit (an
        #: index, so a tick looks at those alone; pruned as it is read).
        self._held: set[str] = set()

    def doubt(self) -> None:
        """Neutron may hold a port of ours not known here (an answer
        lost): the next create waits for a list."""
        self.uncertain = True

    def trust(self) -> None:
        """A list of our ports was read: what is known is what exists."""
        self.uncertain = False

    def __contains__(self, uid: object) -> bool:
        return uid in self.pods

    def __len__(self) -> int:
        return len(self.pods)

    def get(self, uid: str) -> PodRecord | None:
        return self.pods.get(uid)

    # -- the list and the watch --------------------------------------------------
    def replace(self, records: Iterable[PodRecord]) -> None:
        """The pods of a whole list, each record new; what a PodPort named
        for a pod the list lacks now is kept (:attr:`lacking`)."""
        old, self.pods = self.pods, {}
        for record in records:
            self.pods[record.uid] = record
        for uid, record in old.items():
            if uid not in self.pods and (record.named is not None or
                                         record.inflight):
                # What is kept of it: what it names, its create's time.
                self.lacking[uid] = PodRecord(
                    uid, record.namespace, record.name, named=record.named,
                    inflight=record.inflight)
        del old
        for uid in self.lacking.keys() & self.pods.keys():
            self._back(self.pods[uid])

    def add(self, record: PodRecord) -> PodRecord:
        """A pod new to the book (a watch event); what its PodPort names
        and its create's time, if kept while it was lacking, come with
        it."""
        self.pods[record.uid] = record
        self._back(record)
        return record

    def _back(self, record: PodRecord) -> None:
        """A pod lacked arrived: what was kept of it is its again."""
        kept = self.lacking.pop(record.uid, None)
        if kept is not None:
            record.names(record.named or kept.named)
            if kept.inflight:
                self.hold(record.uid, kept.inflight)

    def drop(self, uid: str) -> PodRecord | None:
        """Pod ``uid`` was deleted: its record (listed, else lacking),
        gone from the book with all it held."""
        lacked = self.lacking.pop(uid, None)
        return self.pods.pop(uid, lacked)

    # -- what PodPorts name ---------------------------------------------------------
    def named(self, uid: str) -> Named | None:
        """What pod ``uid``'s PodPort names, listed or lacking."""
        record = self.pods.get(uid) or self.lacking.get(uid)
        return record.named if record is not None else None

    def name(self, uid: str, named: Named | None) -> None:
        """Pod ``uid``'s PodPort names ``named`` (None: nothing, or it is
        gone); a pod not listed is kept as lacking while it names one."""
        record = self.pods.get(uid) or self.lacking.get(uid)
        if record is None and named is not None:
            record = self.lacking[uid] = PodRecord(uid, "", "")
        if record is not None:
            record.names(named)
            if uid in self.lacking and named is None and \
                    not record.inflight:
                del self.lacking[uid]

    def all_named(self) -> Iterator[tuple[str, Named]]:
        """(uid, what its PodPort names) of every PodPort read."""
        for records in (self.pods, self.lacking):
            for uid, record in records.items():
                if record.named is not None:
                    yield uid, record.named

    # -- creates that may still commit ---------------------------------------------
    def hold(self, uid: str, until: float) -> None:
        """A create of pod ``uid``'s port may commit until ``until`` (the
        pace's clock): nothing is made for it before."""
        record = self.pods[uid]
        record.waits(max(record.inflight, until))
        self._held.add(uid)

    def release(self, uid: str) -> None:
        """Pod ``uid`` waits for no create any more."""
        record = self.pods.get(uid)
        if record is not None:
            record.waits(0.0)
        self._held.discard(uid)

    def held(self) -> list[PodRecord]:
        """The listed pods whose create may still commit."""
        out = []
        for uid in list(self._held):
            record = self.pods.get(uid)
            if record is None or not record.inflight:
                self._held.discard(uid)
            else:
                out.append(record)
        return out

    def creates(self) -> list[tuple[str, float]]:
        """(uid, until when) of every create that may still commit, the
        lacking pods' included."""
        return [(r.uid, r.inflight) for r in self.held()] + [
            (uid, r.inflight) for uid, r in self.lacking.items()
            if r.inflight]

    def expire(self, now: float, *, idempotent: bool) -> None:
        """A create that can no longer commit (``now``, the pace's
        clock), a finished pod's, or any where creates are
        ``idempotent`` (derived MACs), holds no pod back; the pods the
        list lacks keep none either."""
        for record in self.held():
            if idempotent or record.finished or record.inflight <= now:
                self.release(record.uid)
        for uid, record in list(self.lacking.items()):
            record.waits(0.0)
            if record.named is None:
                del self.lacking[uid]

    # -- the pods' ports ---------------------------------------------------------------
    def port_name(self, uid: str, tag: str) -> str:
        """The Neutron port name of pod ``uid``'s port: the cluster's
        ``tag``, the pod's namespace and name."""
        record = self.pods[uid]
        return wire.port_name(tag, f"{record.namespace}/{record.name}")

    def holds(self, uid: str, port_id: str) -> None:
        """Pod ``uid`` holds port ``port_id`` from now on."""
        self.pods[uid].took(port_id)

    def node(self, uid: str) -> str:
        """The node pod ``uid``'s port is bound to ("": none)."""
        record = self.pods.get(uid)
        return record.node if record is not None else ""

    def finished(self) -> list[PodRecord]:
        """The pods in a terminal phase."""
        return [r for r in self.pods.values() if r.finished]
