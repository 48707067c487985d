"""What the network judge tells every node in its NodeNetwork record's
spec: that it judges the node, and the cluster-wide fault it declared, if
any::

    spec:
      nodeName: node-a
      cluster:                      # present: a judge judges this record
        fault: ovn-controller       # absent: no cluster-wide fault
        since: "2024-05-01T10:00:00Z"

Why the node must know: a runtime on libcni 1.2 (containerd 2.x, CRI-O)
turns a failing CNI STATUS into the Node's ``Ready=False``, and during a
cluster-wide fault (the Southbound database down) STATUS would fail on
every node at once: every node tainted, an auto-healer watching ``Ready``
rebuilding them all. While the fault's kind names a check that fails on
the node, STATUS does not fail for it (:mod:`kuryr_supervisor.health.
statushold`); ADDs still fail naming the cause, and readiness names it.

Why here: the node reads its own record already (its canary, its share
of the probing) and gets it back with each of its own writes; the spec is
the controller's alone (the nodes' RBAC cannot update it), so a node
cannot excuse another. The judge writes the field only when it differs
from what it wants (a record judged for the first time, a cluster-wide
fault declared or over: one write per record per transition, never a
heartbeat), keeping the rest of the spec (:func:`merged`).
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

#: The key of the judge's part of the spec.
KEY = "cluster"
#: A fault's kind: a check name or one of the judge's kinds (``peers``).
_KIND = re.compile(r"^[a-z0-9][-a-z0-9]{0,62}$")
_MAX_SINCE = 32


@dataclasses.dataclass(frozen=True)
class ClusterVerdict:
    """The judge's word on the whole cluster."""

    fault: str = ""       # "": none; else the kind most nodes share
    since: str = ""       # RFC 3339, when declared (for people)


def field(verdict: ClusterVerdict) -> dict[str, str]:
    """The spec's ``cluster`` for ``verdict``."""
    return {"fault": verdict.fault, "since": verdict.since} \
        if verdict.fault else {}


def merged(spec: Mapping[str, Any] | None, node: str,
           verdict: ClusterVerdict | None) -> dict[str, Any]:
    """``spec`` (the rest of it kept: the canary's part) with the judge's
    part set to ``verdict``, or taken out (None: no judge any more)."""
    out = {k: v for k, v in (spec or {}).items() if k != KEY}
    out["nodeName"] = node
    if verdict is not None:
        out[KEY] = field(verdict)
    return out


def verdict(obj: Mapping[str, Any] | None, node: str
            ) -> ClusterVerdict | None:
    """What ``node``'s record ``obj`` says: None when no judge judges it
    (no record, or no ``cluster`` in its spec); ValueError when the field
    does not hold up (the node then keeps what it knew)."""
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
    fault, since = raw.get("fault", ""), raw.get("since", "")
    if not isinstance(fault, str) or (fault and not _KIND.match(fault)):
        raise ValueError("spec.cluster.fault is not a kind of fault")
    if not isinstance(since, str) or len(since) > _MAX_SINCE:
        raise ValueError("spec.cluster.since is not a time")
    return ClusterVerdict(fault, since if fault else "")
