"""This node's pods whose port is lost, in shared memory, for the health.

A pod's port is lost when the controller made its Neutron port again under
a new id and the node cannot point the pod's interface at it (another MAC,
OVSDB refuses): the pod keeps its address and has no network. The
Watcher's PodPort follower (:mod:`kuryr_supervisor.kubernetes.lostpods`)
keeps the set and publishes it here (it alone writes); the HealthManager
reads it for ``/status``, ``/metrics`` and the node's NodeNetwork record.

Bounded: the total count and at most :data:`MAX_ROWS` pods (namespace,
name, the PodPort's port id, why; each cut to its field's bytes), so the
memory, the record and ``/status`` stay small whatever the count.

One writer, no lock a killed writer could leave taken: a generation is
made odd before the rows are written and even after (a sequence lock); a
reader that sees it odd or moved reads again, a few times at most, then
takes what it read (a torn row is shown once, the next read is whole).

:class:`LostPorts` is the set as every reader sees it, with its one
document form (``{count, pods: [{namespace, name, portId, why}]}``: the
``lostPorts`` of ``/status`` and of the record) and the check of a
document a node wrote (:meth:`LostPorts.parse`).
"""
from __future__ import annotations

import dataclasses
import multiprocessing.context
import re
from collections.abc import Mapping, Sequence
from typing import Any

#: Pods listed (the count goes on beyond).
MAX_ROWS = 64
#: Bytes of each field of a row: namespace, name, port id, why.
FIELDS = (("namespace", 63), ("name", 253), ("portId", 64), ("why", 256))
_ROW = sum(size for _, size in FIELDS)
_GEN, _COUNT, _ROWS, _HEADER = range(4)
#: Reads of a row set being written before a reader takes what it has.
_TRIES = 8
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
#: A count no node reaches (the kubelet runs a few hundred pods at most).
MAX_COUNT = 1_000_000


@dataclasses.dataclass(frozen=True, order=True)
class LostPort:
    """One pod whose interface cannot be pointed at its port."""

    namespace: str
    name: str
    port_id: str
    why: str = ""

    def document(self) -> dict[str, str]:
        return {"namespace": self.namespace, "name": self.name,
                "portId": self.port_id, "why": self.why}


@dataclasses.dataclass(frozen=True)
class LostPorts:
    """The set as published: the total ``count`` and the first pods."""

    count: int = 0
    pods: tuple[LostPort, ...] = ()

    def document(self) -> dict[str, Any]:
        return {"count": self.count,
                "pods": [p.document() for p in self.pods[:MAX_ROWS]]}

    @classmethod
    def parse(cls, raw: Any, what: str = "lostPorts") -> LostPorts:
        """A document as :meth:`document` writes it (None: none lost);
        ValueError says what is wrong."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ValueError(f"{what} is not an object")
        count, pods = raw.get("count"), raw.get("pods", [])
        if isinstance(count, bool) or not isinstance(count, int) or \
                not 0 <= count <= MAX_COUNT:
            raise ValueError(f"{what}.count is not 0-{MAX_COUNT}")
        if not isinstance(pods, list) or len(pods) > MAX_ROWS:
            raise ValueError(f"{what}.pods is not a list of at most "
                             f"{MAX_ROWS}")
        return cls(count, tuple(_pod(p, f"{what}.pods[{i}]")
                                for i, p in enumerate(pods)))


def _pod(raw: Any, what: str) -> LostPort:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{what} is not an object")
    values = []
    for key, size in FIELDS:
        value = raw.get(key, "")
        if not isinstance(value, str) or len(value.encode()) > size:
            raise ValueError(f"{what}.{key} is not a string of at most "
                             f"{size} bytes")
        values.append(value)
    for key, value in zip(("namespace", "name"), values, strict=False):
        if not _NAME.match(value):
            raise ValueError(f"{what}.{key} is not an object name")
    return LostPort(*values)


def _cut(text: str, size: int) -> bytes:
    """``text`` in at most ``size`` bytes of UTF-8, never half a character."""
    return text.encode()[:size].decode(errors="ignore").encode()


class LostPortBoard:
    """Named access (see the module)."""

    def __init__(self, header: Any = None, rows: Any = None) -> None:
        self._h = [0.0] * _HEADER if header is None else header
        self._rows = bytearray(MAX_ROWS * _ROW) if rows is None else rows

    @classmethod
    def create(cls, ctx: multiprocessing.context.BaseContext
               ) -> LostPortBoard:
        return cls(ctx.RawArray("d", _HEADER),
                   ctx.RawArray("c", MAX_ROWS * _ROW))

    def publish(self, lost: LostPorts) -> None:
        """The set from now on (written by the Watcher's follower)."""
        gen = int(self._h[_GEN])
        gen += 1 if gen % 2 == 0 else 2         # odd: being written
        self._h[_GEN] = float(gen)
        rows: Sequence[LostPort] = lost.pods[:MAX_ROWS]
        for row, pod in enumerate(rows):
            at = row * _ROW
            for (_, size), text in zip(FIELDS, (pod.namespace, pod.name,
                                                pod.port_id, pod.why),
                                       strict=True):
                self._rows[at:at + size] = _cut(text, size).ljust(size, b"\0")
                at += size
        self._h[_COUNT] = float(lost.count)
        self._h[_ROWS] = float(len(rows))
        self._h[_GEN] = float(gen + 1)

    def read(self) -> LostPorts:
        """The set as last published (none before the first publish)."""
        lost = LostPorts()
        for _ in range(_TRIES):
            gen = self._h[_GEN]
            lost = self._copy()
            if int(gen) % 2 == 0 and self._h[_GEN] == gen:
                break
        return lost

    def _copy(self) -> LostPorts:
        count = int(self._h[_COUNT])
        pods = []
        for row in range(min(int(self._h[_ROWS]), MAX_ROWS)):
            raw, at, values = bytes(self._rows[row * _ROW:(row + 1) * _ROW]), \
                0, []
            for _, size in FIELDS:
                values.append(raw[at:at + size].rstrip(b"\0").decode(
                    errors="replace"))
                at += size
            pods.append(LostPort(*values))
        return LostPorts(max(count, len(pods)), tuple(pods))
