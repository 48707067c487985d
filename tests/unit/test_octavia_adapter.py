"""The adapter's Octavia calls against the Octavia fake over real HTTP
(tests/fixtures/octavia.py): what the fake alone can show on demand
(hangs, Octavia down, garbage, pages, the write fence's session). What Octavia
itself does, against both the fake and the real one:
tests/functional/test_octavia_contract.py."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack import lbwire, octavia, sendfence
from kuryr_supervisor.controller.openstack.octavia import ListenerSpec
from kuryr_supervisor.kubernetes.fence import WriteFence
from tests.fixtures.lbclouds import LbCloud


def test_octavia_is_found_in_the_catalog_and_lists_page(
        fake_octavia: LbCloud, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    api = fake_octavia.api(tmp_path)
    api.reachable()
    monkeypatch.setattr(octavia, "PAGE_SIZE", 2)
    made = {api.create_load_balancer(
        name=f"lb{n}", description="", vip_address=fake_octavia.vip(),
        vip_subnet_id=fake_octavia.service_subnet_id, tags=["t"],
        provider="ovn", listeners=[]).id for n in range(5)}
    assert {lb.id for lb in api.load_balancers(tags=["t"])} == made
    fake = fake_octavia.fake
    assert fake is not None
    assert fake.counts()["GET /v2/lbaas/loadbalancers"] == 1 + 3


def test_errors_are_the_taxonomys(fake_octavia: LbCloud,
                                  tmp_path: Path) -> None:
    """404 on a read or a delete is "not there"; 409 busy; a 501 (an
    option the provider does not take) a refusal; 5xx and garbage an
    outage, never a refusal."""
    api = fake_octavia.api(tmp_path)
    fake = fake_octavia.fake
    assert fake is not None
    assert api.load_balancer("9d7d4b5c-0000-4000-8000-000000000000") is None
    assert api.tree("9d7d4b5c-0000-4000-8000-000000000000") is None
    assert api.delete_load_balancer("9d7d4b5c-0000-4000-8000-000000000000") \
        is False
    with pytest.raises(osa.OpenStackRefused) as refused:
        api.create_load_balancer(
            name="x", description="", vip_address=fake_octavia.vip(),
            vip_subnet_id=fake_octavia.service_subnet_id, tags=[],
            provider="ovn", listeners=[ListenerSpec(
                "TCP", 80, "ROUND_ROBIN", ())])
    assert refused.value.status == 501
    lb = api.create_load_balancer(
        name="x", description="", vip_address=fake_octavia.vip(),
        vip_subnet_id=fake_octavia.service_subnet_id, tags=[],
        provider="ovn", listeners=[])
    with pytest.raises(lbwire.LoadBalancerBusy):
        api.delete_load_balancer(lb.id)
    fake.garbage = True
    with pytest.raises(osa.OpenStackUnavailable):
        api.load_balancers()
    fake.garbage = False
    fake.down()
    with pytest.raises(osa.OpenStackUnavailable):
        api.load_balancers()
    fake.up()
    assert [x.id for x in api.load_balancers()] == [lb.id]


def test_a_hung_octavia_is_bounded_while_the_caller_beats(
        fake_octavia: LbCloud, tmp_path: Path) -> None:
    api = fake_octavia.api(tmp_path, openstack_timeout=0.5)
    api.reachable()                         # a token, before the hang
    beats: list[float] = []
    api.beat = lambda: beats.append(time.monotonic())
    fake = fake_octavia.fake
    assert fake is not None
    fake.hang = 30.0
    start = time.monotonic()
    with pytest.raises(osa.OpenStackUnavailable, match="no answer within"):
        api.load_balancers()
    assert time.monotonic() - start < 3 * 0.5 + 1.0
    gaps = [b - a for a, b in zip(beats, beats[1:], strict=False)]
    assert len(beats) >= 3 and max(gaps) < 0.5, gaps
    # the caller's-thread calls: bounded by the request timeout alone
    direct = api.within(0.3)
    start = time.monotonic()
    with pytest.raises(osa.OpenStackUnavailable):
        direct.tree("9d7d4b5c-0000-4000-8000-000000000000")
    assert time.monotonic() - start < 2.0
    fake.hang = 0.0


def test_writes_go_through_the_fenced_session(fake_octavia: LbCloud,
                                             tmp_path: Path) -> None:
    """Octavia's writes ask the adapter's write fence, and go through the
    session whose transport checks it before each send (a replica that
    lost its Lease sends nothing more: :mod:`.sendfence`); its reads do
    not; both share the adapter's token."""
    fence = WriteFence(lambda: True)
    cloud = osa.OpenStack.from_conf(fake_octavia.conf(tmp_path), fence=fence)
    api = cloud.octavia()
    assert api.transport.fence is fence
    for scheme in ("http://", "https://"):
        assert isinstance(api.transport.writes.session.session.adapters[
            scheme], sendfence.FencedAdapter)
        assert not isinstance(api.transport.reads.session.session.adapters[
            scheme], sendfence.FencedAdapter)
    lb = api.create_load_balancer(
        name="x", description="", vip_address=fake_octavia.vip(),
        vip_subnet_id=fake_octavia.service_subnet_id, tags=[],
        provider="ovn", listeners=[])
    assert [x.id for x in api.load_balancers()] == [lb.id]
    assert cloud.octavia() is api
