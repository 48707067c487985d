"""A first pod list that lags (the API server's watch cache at
``resourceVersion=0``, several API servers behind one address) deletes,
creates and re-points nothing: a port whose pod the list lacks is deleted
only once a consistent read (a list at ``resourceVersion=""``) confirms
the pod is gone, and the lag is said in the log and in ``/status``.

In this process, against the Kubernetes API fake in its lagging mode
(:meth:`tests.fixtures.fakeapi.FakeAPI.lag_cache`) and the Neutron fake.
"""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kuryr_supervisor.kubernetes.clusterpods import cluster_pod
from kuryr_supervisor.state import Fault
from tests.unit.test_port_retry_safety import (
    bind,
    drive,
    make_world,
    specs,
    start,
    stop,
)


def test_a_lagging_first_list_deletes_no_bound_pods_port(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    w = make_world(tmp_path)
    try:
        pods = w.add(3)
        first = start(w, pods)
        drive(first, lambda: w.ported(pods), 10)
        w.api.lag_cache()              # the cache stops here...
        late = w.api.add_pod("ns", "late", "node-a")    # ...and lacks this
        first.upsert(cluster_pod(late))
        drive(first, lambda: w.ported([*pods, late]), 10)
        bind(w, [*pods, late])
        ports, before = dict(w.neutron.ports), specs(w)
        # A new leader: its first list comes from the lagging cache.
        caplog.set_level(logging.WARNING)
        second = w.handler()
        w.start(second)
        assert w.neutron.ports.keys() == ports.keys(), "a port was deleted"
        assert Fault.PODS_LAGGING in w.counts.fault_bits  # type: ignore[attr-defined]
        assert "lagging" in caplog.text
        # The watch brings the pod the list lacked.
        second.upsert(cluster_pod(late))
        drive(second, lambda: not len(second.batch), 5)
        second.resync(set(second.book.pods))
        assert w.neutron.ports.keys() == ports.keys(), "a port was made"
        assert specs(w) == before, "a PodPort was re-pointed"
        assert w.ported([*pods, late]) and w.counts.total == 0
        # The pod arrived: the list no longer lags behind what it had.
        assert Fault.PODS_LAGGING not in w.counts.fault_bits  # type: ignore[attr-defined]
        # The cache caught up: the port of a pod that is truly gone (its
        # deletion missed) goes at the next relist.
        w.api.catch_up()
        gone = pods[0]
        w.api.delete_pod("ns", gone["metadata"]["name"])
        w.start(second)
        assert w.neutron.ports_for(gone["metadata"]["uid"]) == []
        assert Fault.PODS_LAGGING not in w.counts.fault_bits  # type: ignore[attr-defined]
    finally:
        stop(w)
