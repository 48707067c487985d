"""Finished pods give their ports back.

A pod in a terminal phase (``Succeeded`` or ``Failed``:
:attr:`~kuryr_supervisor.kubernetes.clusterpods.ClusterPod.finished`; a
Job's, a CronJob's, an evicted pod) stays in the API until someone
deletes it, but its network is used no more: the kubelet tears its
sandbox down (CNI DEL), and a finished pod no longer counts against its
namespace's pod quota. Kept, its Neutron port would hold one of the
project's ports and an address of the pod subnet for good, and one
tenant's Jobs would starve every tenant's pods. So a finished pod's
PodPort and ports are released as a deleted pod's are, by the one path
(:meth:`~.owned.OwnedPorts.release`): its PodPort (only while it is that
pod's), then its ports, deleted (a port it took from a pool too: a
deleted pod's never goes back to a pool either). The pod stays in the
handler's record (:class:`~.book.PodBook`), needing no port: it exists, so
its ports are never a gone pod's to the sweep, and nothing is ever made
for it again.

When:

- at the event that says the pod finished, for the port and PodPort the
  handler knows it holds;
- at every resync, for each finished pod the port list (its ``device_id``,
  or a pool port its PodPort names) or the PodPorts read at a process's
  start still show holding something (:func:`holding`): what a restart,
  a new leader or a relist after missed events finds, a release that
  failed, a PodPort that names a port Neutron has lost.

Nothing is released twice: a release that went through leaves nothing in
the record, and a resync releases only what its list shows; a finished
pod whose port and PodPort are already gone costs nothing, and its
deletion later writes nothing.

Safety: Kubernetes never moves a pod out of a terminal phase, so a pod
(its UID) seen finished stays finished in the record: an event that says
otherwise (a stale one, a lagging list) makes it no port again, and a
pod never seen finished (no phase yet, ``Pending``, ``Running``,
``Unknown``) keeps its port. Only that UID's ports (``device_id``, or
the port its own PodPort names) and a PodPort whose owner is that UID
are released: a new pod of the same name keeps its own.
"""
from __future__ import annotations

from kuryr_supervisor.controller.ports.book import PodBook, PodRecord
from kuryr_supervisor.controller.ports.resync import ByDevice


def held(pod: PodRecord, port_id: str = "") -> list[str] | None:
    """The ports ``pod`` is known to hold (``port_id``, and the one its
    PodPort names), or None when it is known to hold nothing."""
    named = pod.named
    if named is None and not port_id:
        return None
    return list(dict.fromkeys(
        p for p in (port_id, named and named.port_id) if p))


def holding(book: PodBook, listing: ByDevice) -> list[tuple[str, list[str]]]:
    """The finished pods that still hold ports (``listing``, the resync's,
    by device: theirs are taken out of it) or a PodPort, and the ids of
    their listed ports (the list is the proof: a port it lacks is not
    deleted again)."""
    out = []
    for pod in book.finished():
        listed = [p.id for p in listing.pop(pod.uid, ())]
        if listed or pod.named is not None:
            out.append((pod.uid, listed))
    return out
