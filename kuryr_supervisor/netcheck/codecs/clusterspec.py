"""What the network judge tells every node in its NodeNetwork record's
spec: that it judges the node, the cluster-wide fault it declared, if
any, and its verdict on the node itself, if faulty::

    spec:
      nodeName: node-a
      cluster:                      # present: a judge judges this record
        fault: ovn-controller       # absent: no cluster-wide fault
        since: "2024-05-01T10:00:00Z"
        node:                       # absent: the judge holds the node fine
          reason: KuryrPeersUnreachable
          message: "its canary cannot reach 2 of 2 peers ..."
          since: "2024-05-01T10:00:00Z"
        judge: "controller-7d9f-x2_1"    # the replica that wrote it
        record: "<this record's metadata.uid>"
        renewTime: "2024-05-01T10:00:30Z"
        lifetimeSeconds: 60

Why the node must know: a runtime on libcni 1.2 (containerd 2.x, CRI-O)
turns a failing CNI STATUS into the Node's ``Ready=False``, and during a
cluster-wide fault (the Southbound database down) STATUS would fail on
every node at once: every node tainted, an auto-healer watching ``Ready``
rebuilding them all. While the fault's kind names a check that fails on
the node, STATUS does not fail for it (:mod:`kuryr_supervisor.
netcheck.node.statushold`). And a node the judge finds cut off (its canary reaches no
peer that the others reach) sees nothing wrong itself: told, its readiness
fails and STATUS answers 51 naming the judge's reason, so the runtime and
the kubelet treat its pods as having lost their network.

A declaration stands only while its judge renews it, as a Lease does
(:func:`standing`): ``renewTime`` is written again every half
``lifetimeSeconds`` while the fault lasts; a controller gone (a crash
loop, a scale to zero, an uninstall) leaves declarations that lapse, and
the node judges alone again. One with no renewal at all (an older judge's)
never stands. The node caps the lifetime it accepts (:data:`MAX_LIFETIME`)
and counts it from when it first saw each renewal too, so no record (a
renewal dated in the future included) can excuse or blame a node for
longer than that without a judge writing it again.

Why here: the node reads its own record already (its canary, its share
of the probing) and gets it back with each of its own writes; the spec is
the controller's alone (the nodes' RBAC cannot update it; its writes pass
the leader's write fence), so a node cannot excuse another. A node may
*create* a record, spec and all (it makes its own at start), so the
judge's declarations also name the record they were written into
(``record``: its ``metadata.uid``, which the API server gives at the
create): a record created with a verdict in it (a compromised node's, for
another node whose record did not exist yet) names no uid it could know,
and :func:`verdict` refuses it. The judge writes the field only when it
differs from what it wants or a declaration is due for renewal, keeping
the rest of the spec (:func:`merged`).
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from kuryr_supervisor.netcheck.codecs.record import epoch

#: The key of the judge's part of the spec.
KEY = "cluster"
#: A fault's kind: a check name or one of the judge's kinds (``peers``).
_KIND = re.compile(r"^[a-z0-9][-a-z0-9]{0,62}$")
#: A reason of the judge's own condition (``Kuryr...``).
_REASON = re.compile(r"^Kuryr[A-Za-z]{1,58}$")
_MAX_SINCE = 32
_MAX_JUDGE = 253
#: The verdict's message, cut to this.
MAX_MESSAGE = 256
#: Seconds a declaration may stand without renewal at most, whatever the
#: record says.
MAX_LIFETIME = 600.0


@dataclasses.dataclass(frozen=True)
class NodeVerdict:
    """The judge holds this node's network broken."""

    reason: str           # one of conditions.CAUSES
    message: str = ""
    since: str = ""       # RFC 3339, for people


@dataclasses.dataclass(frozen=True)
class ClusterVerdict:
    """The judge's word in one record."""

    fault: str = ""       # "": none; else the kind most nodes share
    since: str = ""       # RFC 3339, when declared (for people)
    node: NodeVerdict | None = None
    judge: str = ""       # the replica that wrote it
    renewed: str = ""     # RFC 3339 of the last renewal ("": none)
    lifetime: float = 0.0
    record: str = ""      # the uid of the record it was written into

    @property
    def declares(self) -> bool:
        """Whether it says something a node acts on (and so must renew)."""
        return bool(self.fault) or self.node is not None

    def key(self) -> tuple[Any, ...]:
        """What a change is: never the renewal, nor the node verdict's
        message (refreshed with the renewals)."""
        node = self.node
        return (self.fault, self.since,
                None if node is None else (node.reason, node.since),
                (self.judge, self.record) if self.declares else "")


def field(verdict: ClusterVerdict) -> dict[str, Any]:
    """The spec's ``cluster`` for ``verdict``."""
    out: dict[str, Any] = {}
    if verdict.fault:
        out.update(fault=verdict.fault, since=verdict.since)
    if verdict.node is not None:
        out["node"] = {"reason": verdict.node.reason,
                       "message": verdict.node.message[:MAX_MESSAGE],
                       "since": verdict.node.since}
    if verdict.declares:
        out.update(judge=verdict.judge[:_MAX_JUDGE], record=verdict.record,
                   renewTime=verdict.renewed,
                   lifetimeSeconds=int(verdict.lifetime))
    return out


def merged(spec: Mapping[str, Any] | None, node: str,
           verdict: ClusterVerdict | None) -> dict[str, Any]:
    """``spec`` (the rest of it kept: the canary's part) with the judge's
    part set to ``verdict``, or taken out (None: no judge any more)."""
    out = {k: v for k, v in (spec or {}).items() if k != KEY}
    out["nodeName"] = node
    if verdict is not None:
        out[KEY] = field(verdict)
    return out


def _text(raw: Mapping[str, Any], key: str, most: int, what: str) -> str:
    value = raw.get(key, "")
    if not isinstance(value, str) or len(value) > most:
        raise ValueError(f"spec.cluster.{what} is not a string of at most "
                         f"{most}")
    return value


def _node(raw: Any) -> NodeVerdict | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError("spec.cluster.node is not an object")
    reason = raw.get("reason")
    if not isinstance(reason, str) or not _REASON.match(reason):
        raise ValueError("spec.cluster.node.reason is not a reason of the "
                         "judge's")
    message = raw.get("message", "")
    return NodeVerdict(reason, message[:MAX_MESSAGE]
                       if isinstance(message, str) else "",
                       _text(raw, "since", _MAX_SINCE, "node.since"))


def verdict(obj: Mapping[str, Any] | None, node: str
            ) -> ClusterVerdict | None:
    """What ``node``'s record ``obj`` says: None when no judge judges it
    (no record, or no ``cluster`` in its spec); ValueError when the field
    does not hold up, or declares something for another record than
    ``obj`` (see the module; the node then keeps what it knew)."""
    if obj is None:
        return None
    spec = obj.get("spec")
    if not isinstance(spec, Mapping) or spec.get("nodeName") != node:
        raise ValueError("spec.nodeName is not this node")
    raw = spec.get(KEY)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError("spec.cluster is not an object")
    fault = raw.get("fault", "")
    if not isinstance(fault, str) or (fault and not _KIND.match(fault)):
        raise ValueError("spec.cluster.fault is not a kind of fault")
    since = _text(raw, "since", _MAX_SINCE, "since")
    lifetime = raw.get("lifetimeSeconds", 0)
    if isinstance(lifetime, bool) or not isinstance(lifetime, (int, float)) \
            or lifetime < 0:
        raise ValueError("spec.cluster.lifetimeSeconds is not a number of "
                         "seconds")
    found = ClusterVerdict(
        fault, since if fault else "", _node(raw.get("node")),
        _text(raw, "judge", _MAX_JUDGE, "judge"),
        _text(raw, "renewTime", _MAX_SINCE, "renewTime"), float(lifetime),
        _text(raw, "record", _MAX_SINCE + 32, "record"))
    uid = (obj.get("metadata") or {}).get("uid")
    if found.declares and (not found.record or found.record != uid):
        raise ValueError("spec.cluster was not written into this record by "
                         "the judge (it names another record's uid)")
    return found


def standing(verdict: ClusterVerdict, wall: float,
             observed: float | None = None) -> bool:
    """Whether ``verdict``'s declarations still stand at ``wall`` (epoch
    seconds, the node's clock): renewed within its lifetime (at most
    :data:`MAX_LIFETIME`); and, given ``observed`` (seconds since the node
    first saw this renewal, by its own monotonic clock), seen within it
    too, so neither a node clock that runs behind the judge's nor a
    renewal dated in the future can stretch it. A verdict that declares
    nothing stands."""
    if not verdict.declares:
        return True
    renewed = epoch(verdict.renewed)
    lifetime = min(verdict.lifetime, MAX_LIFETIME)
    if not renewed or lifetime <= 0:
        return False
    if wall - renewed > lifetime:
        return False
    return observed is None or observed <= lifetime
