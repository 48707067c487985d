"""Leader election on a Lease, through the kubernetes client's Lease API,
against the fake API over HTTP."""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from kuryr_supervisor.kubernetes.lease import LeaderElector
from kuryr_supervisor.kubernetes.leases import read_lease, write_lease
from tests.fixtures.fakeapi import FakeAPI


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    server = FakeAPI().start()
    yield server
    server.stop()


def elector(api: FakeAPI, name: str, skew: float = 0.0) -> LeaderElector:
    return LeaderElector(api.client(), namespace="kube-system", name="ctl",
                         identity=name, duration=5,
                         clock=lambda: time.time() + skew)


def test_one_leader_then_takeover_after_expiry(api: FakeAPI) -> None:
    a, b = elector(api, "a"), elector(api, "b")
    assert a.try_acquire_or_renew() and a.leading()
    assert not b.try_acquire_or_renew()
    assert a.try_acquire_or_renew()           # renewal keeps it
    lease = api.leases[("kube-system", "ctl")]
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["leaseTransitions"] == 0
    # a stops renewing: b takes over once it has seen no change for the
    # duration, by its own monotonic clock (whatever the wall clocks say)
    watch = [0.0]
    later = LeaderElector(api.client(), namespace="kube-system", name="ctl",
                          identity="b", duration=5,
                          clock=lambda: time.time() + 6.0,
                          monotonic=lambda: watch[0])
    assert not later.try_acquire_or_renew()   # its first look
    watch[0] += 5.0
    assert later.try_acquire_or_renew()
    lease = api.leases[("kube-system", "ctl")]
    assert lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()       # a sees b's fresh renewal
    assert api.leases[("kube-system", "ctl")]["spec"]["holderIdentity"] == "b"


def test_stale_write_loses(api: FakeAPI) -> None:
    """Two candidates racing on the same version: only one write lands."""
    client = api.client()
    assert read_lease(client.leases, "kube-system", "ctl") is None
    first = write_lease(client.leases, "kube-system", "ctl", holder="a",
                        duration=5, transitions=0, acquired=True,
                        resource_version=None)
    write_lease(client.leases, "kube-system", "ctl", holder="b", duration=5,
                transitions=1, acquired=True,
                resource_version=first.resource_version)
    from kuryr_supervisor.kubernetes.wire import K8sPermanent
    with pytest.raises(K8sPermanent) as err:
        write_lease(client.leases, "kube-system", "ctl", holder="c",
                    duration=5, transitions=1, acquired=True,
                    resource_version=first.resource_version)
    assert err.value.status == 409
    assert read_lease(client.leases, "kube-system", "ctl").holder == "b"  # type: ignore[union-attr]


def test_api_down_leader_keeps_leading_until_expiry(api: FakeAPI) -> None:
    a = elector(api, "a")
    assert a.try_acquire_or_renew()
    api.fail(500)
    assert a.try_acquire_or_renew()          # still within the duration
    a.renewed_at -= 6
    assert not a.try_acquire_or_renew() and not a.leading()
