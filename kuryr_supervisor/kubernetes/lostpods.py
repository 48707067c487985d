"""The PodPort follower's book of this node's pods whose port is lost.

A pod is lost when its interface cannot be pointed at the port its PodPort
names (:mod:`.podportfollow`); it is found again when a later repoint of
its PodPort succeeds, and forgotten when its PodPort is deleted (the pod
is gone) or is missing from a relist. Every change, and every relist,
is handed to ``publish`` (the shared :class:`~kuryr_supervisor.state.
lostports.LostPortBoard`'s, for the HealthManager).

Bounded: one entry per pod (namespace and name: a pod has one PodPort),
and at most ``most`` of them: the PodPorts labelled with this node are
the controller's, one per pod of the node, so the kubelet's pod limit
bounds them; beyond ``most`` a pod is not booked (said once).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from kuryr_supervisor.state.lostports import LostPort, LostPorts

LOG = logging.getLogger(__name__)

#: Pods booked at most (well above any node's pod limit).
MOST = 4096
#: Characters of the reason kept.
WHY_CHARS = 256

Key = tuple[str, str]


class LostPods:
    """See the module."""

    def __init__(self, publish: Callable[[LostPorts], None], *,
                 most: int = MOST) -> None:
        self._publish, self._most = publish, most
        self._lost: dict[Key, LostPort] = {}
        self._full_said = False

    def lose(self, namespace: str, name: str, port_id: str, why: str) -> None:
        """The pod's interface cannot be pointed at ``port_id``."""
        key = (namespace, name)
        entry = LostPort(namespace, name, port_id, why[:WHY_CHARS])
        if self._lost.get(key) == entry:
            return
        if key not in self._lost and len(self._lost) >= self._most:
            if not self._full_said:
                self._full_said = True
                LOG.warning("more than %d pods of this node have lost their "
                            "port: %s/%s and later ones are not counted",
                            self._most, namespace, name)
            return
        self._lost[key] = entry
        self._changed()

    def found(self, namespace: str, name: str) -> None:
        """The pod's interface points at its port (or its PodPort is
        gone): not lost."""
        if self._lost.pop((namespace, name), None) is not None:
            self._changed()

    def keep_only(self, keys: Iterable[Key]) -> None:
        """A relist: the pods whose PodPort is not in it are gone. Publishes
        whatever changed: a new Watcher's first list overwrites what its
        predecessor left in shared memory."""
        keep = set(keys)
        for key in [key for key in self._lost if key not in keep]:
            del self._lost[key]
        self._changed()

    def current(self) -> LostPorts:
        """The book: its count, and its pods in name order."""
        return LostPorts(len(self._lost), tuple(sorted(self._lost.values())))

    def _changed(self) -> None:
        if len(self._lost) < self._most:
            self._full_said = False
        self._publish(self.current())
