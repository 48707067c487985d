"""The OpenStack adapter against Keystone and Neutron fakes over real HTTP.

Fake only: these count the tokens Keystone issued and the requests Neutron
served, or inject what a real cloud cannot show on demand (hangs, garbage,
3 s tokens). The adapter's calls against both clouds (ports, bulk, quota,
the tag/network/project scope, a wrong password) and real outages:
tests/functional/test_cloud_adapter.py."""
from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack import sendfence
from kuryr_supervisor.kubernetes.fence import WriteFence
from tests.fixtures.openstack import PROJECT_ID, FakeKeystone, FakeNeutron


def neutron_conf(tmp_path: Path, keystone: FakeKeystone,
                 **controller: object) -> cfg.ConfigOpts:
    """A ConfigOpts loaded from a file, as an operator writes it."""
    lines = ["[neutron]"] + [f"{k} = {v}" for k, v in
                             keystone.conf_overrides().items()]
    lines += ["[controller]"] + [f"{k} = {v}" for k, v in controller.items()]
    path = tmp_path / "controller.conf"
    path.write_text("\n".join(lines) + "\n")
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf(["--config-file", str(path)], default_config_files=[])
    return conf


@pytest.fixture
def cloud() -> Iterator[tuple[FakeKeystone, FakeNeutron]]:
    keystone = FakeKeystone().start()
    neutron = FakeNeutron(keystone).start()
    yield keystone, neutron
    neutron.stop()
    keystone.stop()


def test_port_lifecycle(tmp_path: Path, cloud: tuple[FakeKeystone, FakeNeutron]) -> None:
    keystone, neutron = cloud
    api = osa.OpenStack.from_conf(neutron_conf(tmp_path, keystone))
    port = api.create_port(network_id=neutron.network_id,
                           subnet_id=neutron.subnet["id"], name="p",
                           device_id="uid-1")
    assert port.ip is not None and port.mac.startswith("fa:16:3e")
    assert [p.id for p in api.ports_of("uid-1")] == [port.id]
    assert api.ports_of("uid-2") == []
    subnet = api.subnet(port.subnet_id)
    assert str(subnet.cidr) == "10.20.0.0/24" and str(subnet.gateway) == "10.20.0.1"
    assert api.delete_port(port.id) is True
    assert api.delete_port(port.id) is False
    assert neutron.ports == {}
    assert keystone.issued() == 1       # one token for all of it
    # A fence that can close: writes (and the login a write needs) go
    # through a transport that checks it before each send, reads do not;
    # both share one token.
    fenced = osa.OpenStack.from_conf(neutron_conf(tmp_path, keystone),
                                     fence=WriteFence(lambda: True))
    for scheme in ("http://", "https://"):
        assert isinstance(fenced.transport.writes.session.session.adapters[scheme],
                          sendfence.FencedAdapter)
        assert not isinstance(fenced._session.session.adapters[scheme],
                              sendfence.FencedAdapter)
    made = fenced.create_port(network_id=neutron.network_id,
                              subnet_id=neutron.subnet["id"], name="p",
                              device_id="uid-3")
    assert [p.id for p in fenced.ports_of("uid-3")] == [made.id]
    assert keystone.issued() == 2       # the fenced adapter's one token
    assert not isinstance(api._session.session.adapters["http://"],
                          sendfence.FencedAdapter)     # an open fence


def test_canaries_are_a_family_of_their_own(
        tmp_path: Path, cloud: tuple[FakeKeystone, FakeNeutron]) -> None:
    """A canary port (device_owner CANARY_OWNER) is never in the pods'
    scope: neither their list nor their per-pod lookup sees it."""
    keystone, neutron = cloud
    api = osa.OpenStack.from_conf(neutron_conf(tmp_path, keystone))
    tag = "kuryr-supervisor:c1"
    pod = api.create_port(network_id=neutron.network_id,
                          subnet_id=neutron.subnet["id"], name="p",
                          device_id="uid-1", tags=[tag])
    canary = api.create_port(network_id=neutron.network_id,
                             subnet_id=neutron.subnet["id"],
                             name="kuryr-canary-node-a",
                             device_id="kuryr-canary:node-a", tags=[tag],
                             host="node-a", device_owner=osa.CANARY_OWNER)
    assert neutron.ports[canary.id]["device_owner"] == "compute:kuryr-canary"
    assert canary.host == "node-a"
    assert [p.id for p in api.owned_ports(network_id=neutron.network_id,
                                          tag=tag)] == [pod.id]
    assert api.ports_of("kuryr-canary:node-a") == []
    assert [p.id for p in api.owned_ports(
        network_id=neutron.network_id, tag=tag,
        device_owner=osa.CANARY_OWNER)] == [canary.id]


def test_neutron_endpoint_chosen_by_region_interface_or_override(
        tmp_path: Path, cloud: tuple[FakeKeystone, FakeNeutron]) -> None:
    """The catalog's network endpoint unless [neutron] says otherwise: a
    region the catalog lacks finds none (Neutron unavailable, naming the
    endpoint); endpoint_override is used instead of the catalog."""
    keystone, neutron = cloud
    conf = neutron_conf(tmp_path, keystone)
    osa.OpenStack.from_conf(conf)           # registers [neutron]
    conf.set_override("valid_interfaces", ["internal"], "neutron")
    assert osa.OpenStack.from_conf(conf).subnet(neutron.subnet["id"])
    conf.set_override("region_name", "RegionTwo", "neutron")
    with pytest.raises(osa.OpenStackUnavailable, match="endpoint"):
        osa.OpenStack.from_conf(conf).subnet(neutron.subnet["id"])
    conf.clear_override("region_name", "neutron")
    # The catalog now points nowhere; the override still reaches Neutron.
    real, keystone.neutron_url = neutron.url, "http://127.0.0.1:9"
    with pytest.raises(osa.OpenStackUnavailable):
        osa.OpenStack.from_conf(conf).subnet(neutron.subnet["id"])
    conf.set_override("endpoint_override", real, "neutron")
    assert osa.OpenStack.from_conf(conf).subnet(neutron.subnet["id"])


def test_quota_and_over_quota(tmp_path: Path, cloud: tuple[FakeKeystone, FakeNeutron]) -> None:
    keystone, neutron = cloud
    neutron.port_limit = 1
    api = osa.OpenStack.from_conf(neutron_conf(tmp_path, keystone))
    assert api.port_quota(PROJECT_ID).left == 1
    api.create_port(network_id=neutron.network_id, subnet_id="", name="a",
                    device_id="a")
    assert api.port_quota(PROJECT_ID).left == 0
    with pytest.raises(osa.QuotaExceeded):
        api.create_port(network_id=neutron.network_id, subnet_id="",
                        name="b", device_id="b")


def test_token_renewed_before_expiry(tmp_path: Path,
                                     cloud: tuple[FakeKeystone, FakeNeutron]) -> None:
    """A token is renewed once it expires within the margin, never after:
    Keystone, Neutron and the adapter on one fake wall clock, moved on
    instead of slept on."""
    keystone, neutron = cloud
    now = [time.time()]
    keystone.clock = lambda: now[0]
    keystone.token_lifetime = 3.0
    api = osa.OpenStack.from_conf(neutron_conf(tmp_path, keystone,
                                               token_renew_margin=1.5),
                                  clock=lambda: now[0])
    first = api.token()
    assert first.project_id == PROJECT_ID
    assert first.expires_at == pytest.approx(now[0] + 3.0, abs=1.0)
    for _ in range(20):                       # fresh: no new token
        api.token()
        api.ports_of("x")
    assert keystone.issued() == 1
    now[0] += 1.4                             # not yet within the margin
    assert api.token() == first and keystone.issued() == 1
    now[0] += 0.3                             # now within the margin
    second = api.token()
    assert keystone.issued() == 2 and second.expires_at > first.expires_at
    for _ in range(90):                       # across several lifetimes
        now[0] += 0.05
        api.ports_of("x")
    assert neutron.rejected_tokens == 0       # never sent an expired token
    assert keystone.issued() <= 5             # about once every 1.5 s


def test_outages_are_unavailable(tmp_path: Path,
                                 cloud: tuple[FakeKeystone, FakeNeutron]) -> None:
    keystone, neutron = cloud
    api = osa.OpenStack.from_conf(neutron_conf(tmp_path, keystone,
                                               openstack_timeout=1))
    keystone.down()
    with pytest.raises(osa.OpenStackUnavailable):
        api.token()
    keystone.up()
    api.token()
    neutron.down()
    with pytest.raises(osa.OpenStackUnavailable):
        api.ports_of("x")


def test_wrong_password_is_unavailable(tmp_path: Path,
                                       cloud: tuple[FakeKeystone, FakeNeutron]) -> None:
    keystone, _ = cloud
    api = osa.OpenStack.from_conf(neutron_conf(tmp_path, keystone))
    keystone.password = "changed"
    with pytest.raises(osa.OpenStackUnavailable, match="Keystone"):
        api.token()


def test_cni_role_can_check_openstack_too(tmp_path: Path,
                                          cloud: tuple[FakeKeystone, FakeNeutron]) -> None:
    """Nested deployments: [controller] openstack_checks adds the keystone and
    neutron readiness checks to the CNI role's HealthManager (the
    data-plane checks are the node side of network health's)."""
    from kuryr_supervisor.health.checks.base import Kind, Sort
    from kuryr_supervisor.master.roles.cni import node_checks
    keystone, neutron = cloud
    conf = neutron_conf(tmp_path, keystone, openstack_checks="true",
                        openstack_check_interval=60)
    conf.set_override("api_root", "http://127.0.0.1:9", "kubernetes")
    checks = {c.name: c for c in node_checks(None, conf, os.getpid())}  # type: ignore[arg-type]
    assert set(checks) == {"k8s-api", "keystone", "neutron"}
    for name in ("keystone", "neutron"):
        assert (checks[name].kind, checks[name].sort) == (Kind.READINESS, Sort.IO)
    now = time.monotonic()
    for i in range(50):                       # within the interval: cached
        assert checks["keystone"].run(now + i * 0.1).ok
        assert checks["neutron"].run(now + i * 0.1).ok
    assert keystone.issued() == 1
    assert len([r for r in neutron.requests if "quotas" in r[2]]) == 1
    neutron.port_limit = 0
    result = checks["neutron"].run(now + 61)
    assert not result.ok and "port quota exhausted" in result.message
    conf.clear_override("api_root", "kubernetes")
    conf.set_override("openstack_checks", False, "controller")
    assert [c.name for c in node_checks(None, conf, os.getpid())] == []  # type: ignore[arg-type]


@pytest.mark.parametrize("which", ["keystone", "neutron"])
def test_garbage_is_unavailable(tmp_path: Path, which: str,
                                cloud: tuple[FakeKeystone, FakeNeutron]) -> None:
    """200 with a body that is not JSON: an outage, never a crash."""
    keystone, neutron = cloud
    api = osa.OpenStack.from_conf(neutron_conf(tmp_path, keystone))
    if which == "neutron":
        api.token()
    (keystone if which == "keystone" else neutron).garbage = True
    with pytest.raises(osa.OpenStackUnavailable):
        api.ports_of("x")
    with pytest.raises(osa.OpenStackUnavailable):
        api.port_quota(PROJECT_ID)


def test_hung_keystone_bounded_while_beating(
        tmp_path: Path, cloud: tuple[FakeKeystone, FakeNeutron]) -> None:
    """A token request that hangs is bounded by the session timeout, and the
    caller beats while it waits."""
    keystone, _ = cloud
    api = osa.OpenStack.from_conf(neutron_conf(tmp_path, keystone,
                                               openstack_timeout=0.5))
    beats: list[float] = []
    api.beat = lambda: beats.append(time.monotonic())
    keystone.hang = 30.0
    start = time.monotonic()
    with pytest.raises(osa.OpenStackUnavailable):
        api.token()
    took = time.monotonic() - start
    assert took < 3 * 0.5 + 1.0, took
    gaps = [b - a for a, b in zip(beats, beats[1:], strict=False)]
    assert len(beats) >= 3 and max(gaps) < 0.5, gaps


@pytest.mark.parametrize("which", ["keystone", "neutron"])
def test_hang_named_the_same_by_either_bound(
        tmp_path: Path, which: str,
        cloud: tuple[FakeKeystone, FakeNeutron]) -> None:
    """The session's per-request timeout (shorter here than the whole-call
    deadline) names a hung dependency with the words the deadline uses, so
    an operator and a probe read one phrase for one fault."""
    keystone, neutron = cloud
    api = osa.OpenStack.from_conf(neutron_conf(tmp_path, keystone,
                                               openstack_timeout=0.3))
    api.deadline = 5.0
    if which == "neutron":
        api.token()
    (keystone if which == "keystone" else neutron).hang = 30.0
    with pytest.raises(osa.OpenStackUnavailable) as err:
        api.port_quota(PROJECT_ID)
    assert "no answer within 0.3s" in str(err.value), err.value
    assert "timed out" not in str(err.value)


def test_a_call_behind_a_hung_one_names_the_same_deadline() -> None:
    """While a call that overran its deadline still hangs, a later call on
    its path fails at once, in the words the overrun used."""
    import threading

    from kuryr_supervisor.controller.openstack.deadline import BoundedCalls
    release = threading.Event()
    calls = BoundedCalls(0.3)
    try:
        with pytest.raises(osa.OpenStackUnavailable,
                           match=r"^first: no answer within 0.3s$"):
            calls._bounded("first", release.wait, 30)
        started = time.monotonic()
        with pytest.raises(osa.OpenStackUnavailable,
                           match=r"^second: no answer within 0.3s \(an "
                                 r"earlier call still hangs\)$"):
            calls._bounded("second", lambda: None)
        assert time.monotonic() - started < 0.2      # at once, not queued
    finally:
        release.set()
