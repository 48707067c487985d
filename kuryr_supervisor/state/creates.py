"""The port creates a controller's handler has at Neutron, in shared
memory, so that the process the master restarts in its place knows them.

Without leader election there is no creates Lease
(:mod:`kuryr_supervisor.controller.leadership.announcer`); the master's shared
memory outlives a handler process the same way. The neutron_port handler
alone writes here: the time (the shared monotonic clock) until which the
latest of its creates may commit, then the announcement itself (the same
JSON the Lease's annotation carries, at most :data:`SIZE` bytes). A
process killed in the middle of a write leaves the length at -1: its
successor then knows only the time, and holds every pod until then.
"""
from __future__ import annotations

import multiprocessing.context
from typing import Any

#: Bytes of the announcement (3,000 pods named, about 55 bytes each).
SIZE = 192 * 1024
_UNTIL, _LENGTH = 0, 1


class CreatesBoard:
    """Named access to the announcement (see the module)."""

    def __init__(self, header: Any = None, text: Any = None) -> None:
        self._header = [0.0, 0.0] if header is None else header
        self._text = bytearray(SIZE) if text is None else text

    @classmethod
    def create(cls, ctx: multiprocessing.context.BaseContext) -> CreatesBoard:
        return cls(ctx.RawArray("d", 2), ctx.RawArray("c", SIZE))

    def write(self, until: float, text: bytes) -> None:
        """Announce ``text`` (cut to :data:`SIZE`: then unreadable, so every
        pod is held), valid until ``until``."""
        self._header[_LENGTH] = -1.0            # being written
        self._header[_UNTIL] = until
        data = text[:SIZE]
        self._text[:len(data)] = data
        self._header[_LENGTH] = float(len(data))

    def read(self) -> tuple[float, bytes | None]:
        """(until, the announcement); None when a write was cut short."""
        length = int(self._header[_LENGTH])
        if length < 0:
            return self._header[_UNTIL], None
        return self._header[_UNTIL], bytes(self._text[:length])
