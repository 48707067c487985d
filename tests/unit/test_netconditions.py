"""The judge's Node conditions as a table: what a Node says now, what the
judge wants, and the patch (empty when nothing changes)."""
from __future__ import annotations

from typing import Any

import pytest

from kuryr_supervisor.netcheck.codecs import conditions as nc

OWN = "KuryrNetworkHealthy"
WALL = 1_800_000_000.0
NOW = "2027-01-15T08:00:00Z"
BEFORE = "2026-01-01T00:00:00Z"


def cond(kind: str, status: str, reason: str,
         since: str = BEFORE) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason,
            "message": "m", "lastTransitionTime": since}


HEALTHY = nc.Want(nc.HEALTHY)
FAULT = nc.Want(nc.FAULT, "KuryrPeersUnreachable", "cannot reach 3 of 4")
RELEASE = nc.Want(nc.RELEASE)
ROUTE_OK = cond("NetworkUnavailable", "False", "RouteCreated")
ROUTE_BAD = cond("NetworkUnavailable", "True", "NoRouteCreated")
OURS_BAD = cond("NetworkUnavailable", "True", nc.REASON_FAULT)
OWN_OK = cond(OWN, "True", nc.REASON_HEALTHY)
OWN_BAD = cond(OWN, "False", "KuryrPeersUnreachable")

#: (conditions now, want, [(type, status, reason, lastTransitionTime)])
CASES = [
    ([], HEALTHY, [(OWN, "True", nc.REASON_HEALTHY, NOW)]),
    ([OWN_OK], HEALTHY, []),                  # nothing to say: no write
    ([OWN_OK, ROUTE_OK], FAULT,
     [(OWN, "False", "KuryrPeersUnreachable", NOW),
      ("NetworkUnavailable", "True", nc.REASON_FAULT, NOW)]),
    # another writer's True: left alone, our type says why
    ([OWN_OK, ROUTE_BAD], FAULT,
     [(OWN, "False", "KuryrPeersUnreachable", NOW)]),
    ([OWN_BAD, OURS_BAD], FAULT, []),
    # another cause: the reason moves, the transition time does not
    ([OWN_BAD, OURS_BAD], nc.Want(nc.FAULT, "KuryrLocalCheckFailed"),
     [(OWN, "False", "KuryrLocalCheckFailed", BEFORE)]),
    ([OWN_BAD, OURS_BAD], HEALTHY,
     [(OWN, "True", nc.REASON_HEALTHY, NOW),
      ("NetworkUnavailable", "False", nc.REASON_RECOVERED, NOW)]),
    # never clear a True another writer set
    ([OWN_BAD, ROUTE_BAD], HEALTHY, [(OWN, "True", nc.REASON_HEALTHY, NOW)]),
    ([OWN_OK, ROUTE_OK], HEALTHY, []),
    ([OWN_BAD, OURS_BAD], RELEASE,
     [(OWN, None, None, None),
      ("NetworkUnavailable", "False", nc.REASON_RELEASED, NOW)]),
    ([OWN_OK, ROUTE_BAD], RELEASE, [(OWN, None, None, None)]),
    ([ROUTE_OK], RELEASE, []),
]


@pytest.mark.parametrize(("now", "want", "expected"), CASES)
def test_changes(now: list[dict[str, Any]], want: nc.Want,
                 expected: list[tuple[Any, ...]]) -> None:
    patch = nc.changes(now, want, own_type=OWN, wall=WALL)
    got = [(c["type"], c.get("status"), c.get("reason"),
            c.get("lastTransitionTime")) for c in patch]
    assert got == expected
    for c in patch:
        if c.get("$patch") == "delete":
            assert set(c) == {"type", "$patch"}
        else:
            assert c["lastHeartbeatTime"] == NOW


def test_a_judge_starting_carries_on_only_our_faults() -> None:
    assert nc.seeded_fault([OWN_BAD], OWN) == OWN_BAD
    assert nc.seeded_fault([OWN_OK], OWN) is None
    other = cond(OWN, "False", "SomeoneElse")
    assert nc.seeded_fault([other], OWN) is None
