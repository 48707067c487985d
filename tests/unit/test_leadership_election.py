"""A controller handler process waiting for the Lease
(:func:`kuryr_supervisor.controller.leadership.election.wait_for_leadership`) against
the Kubernetes API fake: it leads within about a second of the Lease
running out (``lease_duration`` after the last change it saw of it),
whatever ``lease_duration`` (the goal: a handover within
``lease_duration`` + 2 s)."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.controller.leadership.election import wait_for_leadership
from kuryr_supervisor.kubernetes.lease import LeaderElector
from tests.fixtures.fakeapi import FakeAPI

SHORT = 3                                       # a handover's test


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
    """The standby watches the holder renew, then the holder dies: the
    lease runs out ``lease_duration`` after the last renewal the standby
    saw (its own clock, as client-go judges it), and it leads within about
    a second of that."""
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override("api_root", api.url, "kubernetes")
    conf.set_override("lease_duration", SHORT, "controller")
    gone = LeaderElector(api.client(), namespace="kube-system",
                         name=conf.controller.lease_name, identity="gone_1",
                         duration=SHORT)
    assert gone.try_acquire_or_renew()
    key = ("kube-system", conf.controller.lease_name)
    stopping = threading.Event()
    last = [time.monotonic()]

    def renew_then_die() -> None:        # two more renewals, 1 s apart
        for _ in range(2):
            stopping.wait(1.0)
            gone.try_acquire_or_renew()
            last[0] = time.monotonic()
    holder = threading.Thread(target=renew_then_die, daemon=True)
    holder.start()
    try:
        leading = wait_for_leadership(conf, stopping, lambda: None,
                                      master_pid=4242)
        led = time.monotonic()
        assert leading is not None
        # Its writes are fenced by its lease, which it holds.
        assert leading.fence.closes and leading.fence.allows()
        assert SHORT - 1.0 <= leading.fence.left() <= SHORT
    finally:
        stopping.set()                          # the lease thread ends
        holder.join()
    # Its creates will be announced in the creates Lease, as this replica.
    assert leading.announcer.name == key[1] + "-creates"
    assert leading.announcer.identity.endswith("_4242")
    lease = api.leases[key]
    assert lease["spec"]["holderIdentity"].endswith("_4242")
    # Out SHORT s after the last renewal seen (seen within a second of
    # it); asked again within a second of that.
    took = led - last[0]
    assert SHORT - 0.1 <= took <= SHORT + 2.0, took
