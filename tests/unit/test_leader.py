"""A controller handler process waiting for the Lease
(:func:`kuryr_supervisor.controller.leadership.election.wait_for_leadership`) against
the Kubernetes API fake: it leads within about a second of the Lease
running out, whatever ``lease_duration`` (the goal: a handover within
``lease_duration`` + 2 s)."""
from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Iterator

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.controller.leadership.election import wait_for_leadership
from kuryr_supervisor.kubernetes.lease import LeaderElector
from tests.fixtures.fakeapi import FakeAPI

DURATION = 15                                   # the default


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    server = FakeAPI().start()
    yield server
    server.stop()


def test_candidate_asks_at_least_every_second() -> None:
    for duration in (2, 3, 6, 15, 60):
        e = LeaderElector(None, namespace="n", name="l", identity="i",
                          duration=duration)
        assert e.acquire_period <= 1.0
        assert e.retry_period == max(0.2, duration / 3)


def test_standby_leads_within_a_second_of_the_lease_running_out(
        api: FakeAPI) -> None:
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override("api_root", api.url, "kubernetes")
    conf.set_override("lease_duration", DURATION, "controller")
    # Another replica renewed the Lease DURATION - 1 s ago, then died: it
    # runs out 1 s from now.
    gone = LeaderElector(api.client(), namespace="kube-system",
                         name=conf.controller.lease_name, identity="gone_1",
                         duration=DURATION)
    assert gone.try_acquire_or_renew()
    renewed = datetime.datetime.now(datetime.UTC) - datetime.timedelta(
        seconds=DURATION - 1.0)
    key = ("kube-system", conf.controller.lease_name)
    api.leases[key]["spec"]["renewTime"] = renewed.strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")
    stopping = threading.Event()
    started = time.monotonic()
    try:
        leading = wait_for_leadership(conf, stopping, lambda: None,
                                      master_pid=4242)
        took = time.monotonic() - started
        assert leading is not None
        # Its writes are fenced by its lease, which it holds.
        assert leading.fence.closes and leading.fence.allows()
    finally:
        stopping.set()                          # the lease thread ends
    # Its creates will be announced in the creates Lease, as this replica.
    assert leading.announcer.name == key[1] + "-creates"
    assert leading.announcer.identity.endswith("_4242")
    lease = api.leases[key]
    assert lease["spec"]["holderIdentity"].endswith("_4242")
    # Out at 1 s; asked again within a second of that (a third of the
    # duration, 5 s, before).
    assert 1.0 <= took <= 2.5, took
