"""The Node conditions the network judge writes, and which of them are ours.

Two conditions per judged node:

* our own type (``[network_health] condition_type``, default
  ``KuryrNetworkHealthy``): ``True`` while the node's network is fine,
  ``False`` (reason: the cause, e.g. ``KuryrPeersUnreachable``) during a
  local fault;
* ``NetworkUnavailable``: ``True`` with reason ``KuryrNetworkFault`` during
  a local fault, which Kubernetes turns into the taint
  ``node.kubernetes.io/network-unavailable:NoSchedule``; back to ``False``
  (``KuryrNetworkRecovered``) afterwards.

Rules, as Calico's node controller keeps them:

* ``lastTransitionTime`` changes only when ``status`` changes; a condition
  whose status and reason are already what we want is not written at all;
* ``NetworkUnavailable`` is cleared only when it carries one of our reasons:
  a ``True`` another writer set (the route controller, another CNI) is
  never turned ``False`` by us, and is left alone while we judge a fault
  (the node is already tainted; our own type says why in our words);
* releasing (uninstall, a node no longer judged) removes our own type and
  turns a ``NetworkUnavailable`` of ours ``False`` (``KuryrNetworkReleased``).

Pure functions over the Node's current conditions: :func:`changes` returns
the conditions to patch (strategic merge by type), empty when nothing
changes.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kuryr_supervisor.netcheck.codecs.record import rfc3339
from kuryr_supervisor.state.netverdicts import REASONS

NETWORK_UNAVAILABLE = "NetworkUnavailable"
DEFAULT_TYPE = "KuryrNetworkHealthy"

REASON_HEALTHY = "KuryrNetworkHealthy"
REASON_FAULT = "KuryrNetworkFault"
REASON_RECOVERED = "KuryrNetworkRecovered"
REASON_RELEASED = "KuryrNetworkReleased"
#: Our own type's reasons during a local fault (the cause).
CAUSES = REASONS
OURS = frozenset({REASON_HEALTHY, REASON_FAULT, REASON_RECOVERED,
                  REASON_RELEASED, *CAUSES})

HEALTHY, FAULT, RELEASE = "healthy", "fault", "release"


@dataclasses.dataclass(frozen=True)
class Want:
    """What the judge wants the Node to say: ``kind`` is :data:`HEALTHY`,
    :data:`FAULT` (with ``reason`` one of :data:`CAUSES`) or
    :data:`RELEASE`."""

    kind: str
    reason: str = REASON_HEALTHY
    message: str = ""


def ours(condition: Mapping[str, Any] | None) -> bool:
    return condition is not None and condition.get("reason") in OURS


def find(conditions: Iterable[Mapping[str, Any]],
         kind: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions if c.get("type") == kind), None)


def _condition(kind: str, status: str, reason: str, message: str,
               current: Mapping[str, Any] | None, wall: float
               ) -> dict[str, Any]:
    if current is None or current.get("status") != status:
        since = rfc3339(wall)
    else:
        since = str(current.get("lastTransitionTime") or rfc3339(wall))
    return {"type": kind, "status": status, "reason": reason,
            "message": message[:1024], "lastTransitionTime": since,
            "lastHeartbeatTime": rfc3339(wall)}


def _differs(current: Mapping[str, Any] | None, status: str,
             reason: str) -> bool:
    return current is None or (current.get("status"), current.get("reason")) \
        != (status, reason)


def changes(conditions: Sequence[Mapping[str, Any]], want: Want, *,
            own_type: str, wall: float) -> list[dict[str, Any]]:
    """The conditions to patch so the Node says ``want`` (see the module)."""
    own = find(conditions, own_type)
    unavailable = find(conditions, NETWORK_UNAVAILABLE)
    out: list[dict[str, Any]] = []
    if want.kind == RELEASE:
        if own is not None:
            out.append({"type": own_type, "$patch": "delete"})
        if unavailable is not None and ours(unavailable) and \
                unavailable.get("status") == "True":
            out.append(_condition(
                NETWORK_UNAVAILABLE, "False", REASON_RELEASED,
                "kuryr-supervisor no longer judges this node's network",
                unavailable, wall))
        return out
    faulty = want.kind == FAULT
    status, reason = ("False", want.reason) if faulty else ("True",
                                                            REASON_HEALTHY)
    if _differs(own, status, reason):
        out.append(_condition(own_type, status, reason, want.message, own,
                              wall))
    on = unavailable is not None and unavailable.get("status") == "True"
    if faulty and not on:
        out.append(_condition(NETWORK_UNAVAILABLE, "True", REASON_FAULT,
                              want.message, unavailable, wall))
    elif not faulty and on and ours(unavailable):
        out.append(_condition(NETWORK_UNAVAILABLE, "False", REASON_RECOVERED,
                              want.message or "the node's network is fine",
                              unavailable, wall))
    return out


def seeded_fault(conditions: Sequence[Mapping[str, Any]],
                 own_type: str) -> Mapping[str, Any] | None:
    """Our own type, when it says a local fault (a judge that starts, e.g.
    a new leader, carries it on instead of judging afresh)."""
    own = find(conditions, own_type)
    if own is not None and own.get("status") == "False" and \
            own.get("reason") in CAUSES:
        return own
    return None
