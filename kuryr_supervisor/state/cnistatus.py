"""What CNI STATUS answers, in shared memory, and the node's record writes.

The HealthManager publishes, from its checks, whether an ADD could be
served now and whether running pods may have lost their network; the
Server answers STATUS from it alone (and from the draining flag and its
own IPAM), so STATUS never waits on a dependency: a runtime calls it every
few seconds, and a slow answer makes the node NotReady.

Fields: the code STATUS would answer (0; 50: ADDs cannot be served; 51:
and running pods may have lost connectivity), the :class:`Cause` and a
short text (UTF-8, at most :data:`DETAIL_BYTES`), the :class:`Excuse` for
a failing check STATUS does not fail for; and the record writer's counts
(writes made, writes failed). One writing process (the
HealthManager); the text is written before the code that makes it count,
and a reader that sees a code with a torn text still answers that code.
"""
from __future__ import annotations

import enum
import multiprocessing.context
from typing import Any

DETAIL_BYTES = 256
_CODE, _CAUSE, _WRITES, _WRITE_FAILURES, _EXCUSE, _SIZE = range(6)


class Cause(enum.IntEnum):
    """Why STATUS fails: which check (or fact) says so."""

    NONE = 0
    OVSDB = 1             # Open vSwitch's database or br-int unusable
    OVN_CONTROLLER = 2    # ovn-controller down or off the Southbound DB
    FLOWS = 3             # our interfaces' flows are not installed
    DATAPATH = 4          # the integration bridge's datapath is gone
    BRIDGE = 5            # the Linux bridge is missing or down
    OTHER = 6
    JUDGE = 7             # the network judge holds this node's network broken


class Excuse(enum.IntEnum):
    """Why a failing check does not fail STATUS (see :mod:`kuryr_supervisor.
    netcheck.node.statushold`)."""

    NONE = 0
    HELD = 1              # a shared cause: waiting for the judge's verdict
    CLUSTER = 2           # part of the cluster-wide fault the judge declared


class StatusBoard:
    """Named access to the fields (see the module)."""

    def __init__(self, figures: Any = None, detail: Any = None) -> None:
        self._fig = [0.0] * _SIZE if figures is None else figures
        self._detail = bytearray(DETAIL_BYTES) if detail is None else detail

    @classmethod
    def create(cls, ctx: multiprocessing.context.BaseContext) -> StatusBoard:
        return cls(ctx.RawArray("d", _SIZE), ctx.RawArray("c", DETAIL_BYTES))

    def publish(self, code: int, cause: Cause, detail: str,
                excuse: Excuse = Excuse.NONE) -> None:
        """What STATUS answers from now on (code 0: success; then
        ``cause`` and ``detail`` name a failing check it is excused for)."""
        data = detail.encode("utf-8", "replace")[:DETAIL_BYTES - 1]
        self._detail[:len(data) + 1] = data + b"\0"
        self._fig[_CAUSE] = float(cause)
        self._fig[_EXCUSE] = float(excuse)
        self._fig[_CODE] = float(code)

    def answer(self) -> tuple[int, Cause, str]:
        """(code, cause, detail) as last published."""
        code = int(self._fig[_CODE])
        try:
            cause = Cause(int(self._fig[_CAUSE]))
        except ValueError:
            cause = Cause.OTHER
        raw = bytes(self._detail[:]).split(b"\0", 1)[0]
        return code, cause, raw.decode("utf-8", "replace")

    def excuse(self) -> Excuse:
        """Why a failing check does not fail STATUS now (NONE: none)."""
        try:
            return Excuse(int(self._fig[_EXCUSE]))
        except ValueError:
            return Excuse.NONE

    def count_write(self, ok: bool) -> None:
        """The record writer made (or failed) one API write."""
        field = _WRITES if ok else _WRITE_FAILURES
        self._fig[field] += 1

    def writes(self) -> tuple[int, int]:
        """(record writes made, record writes failed)."""
        return int(self._fig[_WRITES]), int(self._fig[_WRITE_FAILURES])
