"""This node's pods' PodPorts, followed: a pod whose port was made again.

The controller makes a bound pod's vanished port again with the same
address and MAC, bound to the pod's node; Neutron gives it a new id, which
the pod's PodPort then names. OVN and the OVS agent bind a port by the id
its interface carries (``iface-id``), so the node must point the pod's
interface at the new port, or the pod keeps its address and loses its
network. :class:`PodPortFollower` lists, then watches, the PodPorts
labelled with this node (:data:`~.podport.NODE_LABEL`, one list and one
watch per node, resumed and relisted as the pod watch is:
:class:`~.informer.Informer`) and hands each PodPort's pod UID, MAC and
port id to ``repoint`` (the binding's), which changes nothing when the
interface already names that port or the pod is not plugged here. A
``repoint`` that fails (the pod's interface has another MAC, OVSDB
refuses) is logged once per pod and port, and the pod gets a Warning
Event ``PortLost`` (``tell``) and is booked as lost (``lost``:
:mod:`.lostpods`, which the node's health reports); the next event or
relist of that PodPort tries again. A repoint that succeeds, the PodPort's
deletion or its absence from a relist takes the pod out of the book.

Runs in a thread of the Watcher process (:mod:`kuryr_supervisor.workers.
watcher`), beside its pod watch; it never beats (the pod watch does).
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kuryr_supervisor.kubernetes import podport
from kuryr_supervisor.kubernetes.client import K8sClient
from kuryr_supervisor.kubernetes.events import Note, Subject
from kuryr_supervisor.kubernetes.informer import Informer
from kuryr_supervisor.kubernetes.listing import Listing
from kuryr_supervisor.kubernetes.lostpods import LostPods

LOG = logging.getLogger(__name__)

#: (pod UID, MAC, port id) -> what was done ("": nothing); raises when
#: it cannot be done.
Repoint = Callable[[str, str, str], str]


@dataclasses.dataclass(frozen=True)
class Followed:
    """A PodPort as the loop carries it (namespace and name, as a pod's)."""

    namespace: str
    name: str
    obj: Mapping[str, Any]


def followed(obj: Mapping[str, Any]) -> Followed:
    meta = obj.get("metadata") or {}
    return Followed(str(meta.get("namespace") or ""),
                    str(meta.get("name") or ""), obj)


class PodPortFollower:
    """See the module."""

    def __init__(self, client: K8sClient, node: str, repoint: Repoint, *,
                 backoff_max: float = 30.0,
                 tell: Callable[[Note], object] = lambda note: None,
                 lost: LostPods | None = None) -> None:
        self.repoint, self.tell = repoint, tell
        self.lost = lost or LostPods(lambda book: None)
        self._said: set[tuple[str, str]] = set()
        # Every list a consistent read (``cache_relist=False``): a node's
        # few dozen PodPorts.
        self.watch = Informer(
            Listing(client.podports, followed, label_selector=(
                f"{podport.NODE_LABEL}={podport.node_label(node)}")),
            self, backoff_max=backoff_max,
            stall_timeout=client.watch_read_timeout + 5.0,
            cache_relist=False, what="PodPort")

    def start(self, stopping: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.watch.run, args=(stopping,),
                                  name="podport-follow", daemon=True)
        thread.start()
        return thread

    # -- the informer's sink --------------------------------------------------
    def replace_all(self, items: Iterable[Followed],
                    resource_version: str) -> None:
        keys = []
        for item in items:
            self.upsert(item)
            keys.append((item.namespace, item.name))
        self.lost.keep_only(keys)

    def upsert(self, item: Followed) -> None:
        try:
            data = podport.from_object(item.obj)
        except ValueError:              # not a PodPort to act on
            self.lost.found(item.namespace, item.name)
            return
        key = (data.pod_uid, data.port_id)
        try:
            done = self.repoint(data.pod_uid, data.mac, data.port_id)
        except Exception as exc:  # noqa: BLE001 - said once; tried again
            self.lost.lose(item.namespace, item.name, data.port_id, str(exc))
            if key not in self._said:
                self._said.add(key)
                LOG.error("pod %s/%s: its interface is not pointed at its "
                          "port %s: %s", item.namespace, item.name,
                          data.port_id, exc)
                self.tell(Note(
                    "Warning", "PortLost",
                    f"the pod's Neutron port was made again as {data.port_id}"
                    f" and its interface cannot be pointed at it ({exc}): "
                    f"the pod has no network; delete the pod",
                    key=f"{data.pod_uid}/{data.port_id}",
                    subject=Subject("Pod", item.name, item.namespace)))
            return
        self._said.discard(key)
        self.lost.found(item.namespace, item.name)
        if done:
            LOG.warning("pod %s/%s: its port was made again as %s (same "
                        "address and MAC): interface %s points at it now",
                        item.namespace, item.name, data.port_id, done)

    def delete(self, item: Followed) -> None:
        """A PodPort goes with its pod: nothing to point, nothing lost."""
        self.lost.found(item.namespace, item.name)
