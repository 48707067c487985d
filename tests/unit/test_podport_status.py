"""A PodPort's status: a new pod's PodPort starts with none (a new pod
with an old one's name inherits neither ``boundAt`` nor ``portStatus``,
which the status subresource keeps when the object is replaced), and the
controller writes a status only when it differs from what the PodPort
says, read at start with the spec: a restart writes nothing to
Kubernetes. In this process, against the fakes."""
from __future__ import annotations

from pathlib import Path

from tests.fixtures.leader import PODPORTS, WRITES
from tests.unit.test_port_retry_safety import drive, make_world, start, stop


def test_a_new_pod_of_an_old_name_starts_with_no_status(
        tmp_path: Path) -> None:
    w = make_world(tmp_path)
    try:
        pods = w.add(1)
        handler = start(w, pods)
        drive(handler, lambda: w.ported(pods), 10)
        client = w.api.client()
        client.podports.patch("p0", {"status": {
            "boundAt": "2026-11-26T00:00:00Z", "portStatus": "ACTIVE"}},
            namespace="ns", subresource="status")
        # The pod is deleted and made again under its name while no
        # controller runs (its PodPort not collected yet).
        w.api.delete_pod("ns", "p0")
        again = w.api.add_pod("ns", "p0", "node-a")
        w.neutron.faults.bind = "DOWN"           # its port not bound yet
        second = start(w, [])
        drive(second, lambda: w.ported([again]), 10)
        obj = w.api.podports[("ns", "p0")]
        assert obj["spec"]["podUid"] == again["metadata"]["uid"]
        assert "boundAt" not in (obj.get("status") or {}), obj["status"]
        assert (obj.get("status") or {}).get("portStatus", "DOWN") == "DOWN"
    finally:
        stop(w)


def test_a_restart_writes_nothing_to_kubernetes(tmp_path: Path) -> None:
    """20 pods ported (their ports ACTIVE at once: their statuses are
    written as they are made, not at a later resync), the controller
    restarted before its next resync: the new one lists and resyncs and
    writes no PodPort, status included."""
    w = make_world(tmp_path)
    try:
        pods = w.add(20)
        first = start(w, pods)
        drive(first, lambda: w.ported(pods), 10)
        # Their statuses, written in the background as the ports are made.
        drive(first, lambda: all((o.get("status") or {}).get("portStatus")
                                 for o in w.api.podports.values()), 5)
        since = len(w.api.access)
        second = start(w, [])
        second.resync(set(second.book.pods))
        writes = [r for r in w.api.access[since:]
                  if r[1] in WRITES and r[2].startswith(PODPORTS)]
        assert writes == [], f"{len(writes)} writes: {writes[:3]}"
    finally:
        stop(w)
