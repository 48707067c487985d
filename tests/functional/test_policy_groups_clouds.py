"""NetworkPolicy's Neutron calls (security groups by tag with their rules,
rules in bulk naming address groups, address groups and their members, a
port's groups) through the controller's OpenStack adapter, against the
fake (``[fake]``) and the real Neutron (``[real]``) alike
(tests/fixtures/clouds.py): what the real one does here, the fake must do
too.

Neutron is read back as admin and through its access log (how many
requests a change cost), never through the fake's internals. Everything a
test makes carries a tag of its own and is removed at the end, failed or
not (the real cloud is shared by the whole run).
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack import policycalls, sgwire
from kuryr_supervisor.controller.openstack.making import PortMaker
from kuryr_supervisor.controller.openstack.pace import Pace
from kuryr_supervisor.controller.openstack.sgwire import RuleSpec
from kuryr_supervisor.controller.pools import poolports
from tests.fixtures.clouds import AnyCloud

GROUPS, RULES = "/v2.0/security-groups", "/v2.0/security-group-rules"
ADDRESS_GROUPS = "/v2.0/address-groups"


class World:
    """The adapter, a tag of the test's own, and cleanup."""

    def __init__(self, tmp_path: Path, cloud: AnyCloud) -> None:
        self.cloud = cloud
        path = tmp_path / "controller.conf"
        path.write_text("[neutron]\n" + "".join(
            f"{k} = {v}\n" for k, v in cloud.conf_overrides().items()))
        conf = cfg.ConfigOpts()
        conf_mod.register_opts(conf)
        conf(["--config-file", str(path)], default_config_files=[])
        self.api = osa.OpenStack.from_conf(conf)
        self.tag = osa.cluster_tag(f"policy-{uuid.uuid4().hex[:10]}")
        self.ports: list[str] = []

    def requests(self, since: float, method: str, prefix: str) -> int:
        """Neutron's requests ``method`` ``prefix...`` since ``since``."""
        return sum(1 for _, m, p, _ in self.cloud.neutron_access(since)
                   if m == method and p.startswith(prefix))

    def port(self, name: str) -> osa.Port:
        port = self.api.create_port(network_id=self.cloud.network_id,
                                    subnet_id="", name=name,
                                    device_id=f"{self.tag}-{name}")
        self.ports.append(port.id)
        return port

    def cleanup(self) -> None:
        admin = self.cloud.admin
        for port_id in self.ports:
            admin("DELETE", f"/v2.0/ports/{port_id}")
        for query in ({"tags": self.tag}, {"description": self.tag}):
            for sg in admin("GET", GROUPS, **query).expect(200)[
                    "security_groups"]:
                admin("DELETE", f"{GROUPS}/{sg['id']}")
        for ag in admin("GET", ADDRESS_GROUPS, description=self.tag).expect(
                200)["address_groups"]:
            admin("DELETE", f"{ADDRESS_GROUPS}/{ag['id']}")


@pytest.fixture
def world(tmp_path: Path, any_cloud: AnyCloud) -> Iterator[World]:
    made = World(tmp_path, any_cloud)
    yield made
    made.cleanup()


def test_extension(world: World) -> None:
    """The address groups and the rules that name them are there."""
    assert world.api.extension("address-group")
    assert world.api.extension("security-groups-remote-address-group")


def test_groups_by_tag(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group is made tagged (its tag call after the create), described
    by the cluster's tag, with the egress rules Neutron gives every group;
    listed by its tags (page by page), with its rules; one that lost its
    tags is found by its description."""
    api, tag = world.api, world.tag
    monkeypatch.setattr(policycalls, "PAGE_SIZE", 1)
    group = api.create_policy_group("np-a", tag, ["policy:uid-a"])
    assert set(group.tags) == {tag, "policy:uid-a"}
    assert group.description == tag and group.stateful
    assert group.specs() == {RuleSpec("egress", "IPv4"),
                             RuleSpec("egress", "IPv6")}
    other = api.create_policy_group("np-b", tag)
    assert sorted(g.id for g in api.policy_groups(tag)) == sorted(
        [group.id, other.id])
    [found] = api.policy_groups(tag, "policy:uid-a")
    assert found == group
    assert api.policy_groups(osa.cluster_tag("another")) == []
    assert api.policy_group(group.id) == group
    assert api.untagged_policy_groups(tag) == []
    api.set_security_group_tags(other.id, [])
    assert [g.id for g in api.untagged_policy_groups(tag)] == [other.id]
    assert api.delete_policy_group(group.id) is True
    assert api.delete_policy_group(group.id) is False
    assert api.policy_group(group.id) is None


def test_rules_in_bulk_naming_an_address_group(world: World) -> None:
    """A policy's rules are one POST (whatever their number), read back
    equal to the specs asked for; the same rule again is refused naming
    the rule, and its bulk makes nothing."""
    api, tag = world.api, world.tag
    group = api.create_policy_group("np", tag)
    peers = api.create_address_group("peers", tag, ["10.30.0.5", "10.30.0.6/32"])
    assert peers.addresses == {"10.30.0.5/32", "10.30.0.6/32"}
    assert peers.description == tag
    specs = [
        RuleSpec("ingress", protocol="tcp", port_min=80, port_max=81,
                 remote_address_group_id=peers.id),
        RuleSpec("ingress", protocol="udp", port_min=53, port_max=53,
                 remote_address_group_id=peers.id),
        RuleSpec("ingress", protocol="sctp", remote_ip_prefix="10.1.2.3/16",
                 description="ipBlock"),
        RuleSpec("egress", protocol="tcp", remote_ip_prefix="10.30.0.0/22")]
    since = time.time()
    rules = api.create_rules(group.id, specs)
    assert world.requests(since, "POST", RULES) == 1
    assert [r.spec for r in rules] == [s.canonical() for s in specs]
    assert rules[2].spec.remote_ip_prefix == "10.1.0.0/16"
    assert {r.security_group_id for r in rules} == {group.id}
    read = api.policy_group(group.id)
    assert read is not None and read.specs() >= set(rules[i].spec
                                                    for i in range(4))
    extra = RuleSpec("ingress", protocol="tcp", port_min=9000, port_max=9000)
    with pytest.raises(sgwire.RuleExists) as refused:
        api.create_rules(group.id, [extra, specs[0]])
    assert refused.value.rule_id == rules[0].id
    assert extra not in api.policy_group(group.id).specs()  # type: ignore[union-attr]
    assert api.create_rules(group.id, []) == []
    assert api.delete_rule(rules[0].id) is True
    assert api.delete_rule(rules[0].id) is False
    assert specs[0] not in api.policy_group(group.id).specs()  # type: ignore[union-attr]


def test_membership_one_call_each(world: World,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod joining or leaving a set is one call; a change already made
    (its answer lost, say) is made again without what was done: never an
    error, two calls at most."""
    api, tag = world.api, world.tag
    group = api.create_address_group("set", tag)
    assert group.addresses == frozenset()
    assert [g.id for g in api.address_groups(tag)] == [group.id]
    more = api.create_address_group("more", tag)
    monkeypatch.setattr(policycalls, "PAGE_SIZE", 1)       # page by page
    assert sorted(g.id for g in api.address_groups(tag)) == sorted(
        [group.id, more.id])
    assert api.address_groups(osa.cluster_tag("another")) == []
    path = f"{ADDRESS_GROUPS}/{group.id}/"
    since = time.time()
    assert api.add_addresses(group.id, ["10.30.0.7"]).addresses == {
        "10.30.0.7/32"}
    assert world.requests(since, "PUT", path) == 1
    since = time.time()
    assert api.remove_addresses(group.id, ["10.30.0.7/32"]).addresses == set()
    assert world.requests(since, "PUT", path) == 1
    api.add_addresses(group.id, ["10.30.0.8"])
    since = time.time()
    got = api.add_addresses(group.id, ["10.30.0.8", "10.30.0.9"])
    assert got.addresses == {"10.30.0.8/32", "10.30.0.9/32"}
    assert world.requests(since, "PUT", path) == 2
    assert api.add_addresses(group.id, ["10.30.0.9"]).addresses == \
        got.addresses                   # all there already: no error
    # Another writer added many of a large change meanwhile: Neutron's
    # refusal lists more than the part of its text kept; the group read.
    many = [f"10.30.1.{i}" for i in range(1, 41)]
    api.add_addresses(group.id, many[:30])
    since = time.time()
    got = api.add_addresses(group.id, many)
    assert got.addresses == {"10.30.0.8/32", "10.30.0.9/32"} | {
        f"{a}/32" for a in many}
    assert world.requests(since, "PUT", path) == 2
    got = api.remove_addresses(group.id, many[5:] + ["10.30.1.99"])
    assert got.addresses == {"10.30.0.8/32", "10.30.0.9/32"} | {
        f"{a}/32" for a in many[:5]}
    api.remove_addresses(group.id, many[:5])
    got = api.remove_addresses(group.id, ["10.30.0.8", "10.30.0.10"])
    assert got.addresses == {"10.30.0.9/32"}
    assert api.address_group(group.id) == got
    assert api.delete_address_group(group.id) is True
    assert api.delete_address_group(group.id) is False
    assert api.address_group(group.id) is None
    with pytest.raises(sgwire.Missing) as missing:
        api.add_addresses(group.id, ["10.30.0.7"])
    assert missing.value.kind == "AddressGroupNotFound"


def test_refusals(world: World) -> None:
    """What is gone is :class:`Missing`; what is still used is
    :class:`InUse`; neither is an outage."""
    api, tag = world.api, world.tag
    group = api.create_policy_group("np", tag)
    peers = api.create_address_group("peers", tag)
    api.create_rules(group.id, [RuleSpec("ingress",
                                         remote_address_group_id=peers.id)])
    with pytest.raises(sgwire.InUse):
        api.delete_address_group(peers.id)
    port = world.port("p")
    assert api.set_port_security_groups(port.id, [group.id]) == (group.id,)
    with pytest.raises(sgwire.InUse):
        api.delete_policy_group(group.id)
    gone = str(uuid.uuid4())
    with pytest.raises(sgwire.Missing) as missing:
        api.create_rules(gone, [RuleSpec("ingress")])
    assert missing.value.kind == "SecurityGroupNotFound"
    with pytest.raises(sgwire.Missing) as missing:
        api.create_rules(group.id, [RuleSpec(
            "ingress", protocol="tcp", remote_address_group_id=gone)])
    assert missing.value.kind == "AddressGroupNotFound"
    with pytest.raises(sgwire.Missing) as missing:
        api.set_port_security_groups(port.id, [gone])
    assert missing.value.kind == "SecurityGroupNotFound"
    api.delete_port(port.id)
    with pytest.raises(sgwire.Missing) as missing:
        api.set_port_security_groups(port.id, [group.id])
    assert missing.value.kind == "PortNotFound"
    with pytest.raises(sgwire.Missing):
        api.remove_addresses(gone, ["10.30.0.1"])


def test_port_groups(world: World) -> None:
    """A port's groups are set in one call, and read back as set."""
    api, tag = world.api, world.tag
    one = api.create_policy_group("one", tag)
    two = api.create_policy_group("two", tag)
    port = world.port("p")
    assert set(api.set_port_security_groups(port.id, [one.id, two.id])) == \
        {one.id, two.id}
    [seen] = world.cloud.ports(id=port.id)
    assert set(seen["security_groups"]) == {one.id, two.id}
    assert api.set_port_security_groups(port.id, [two.id]) == (two.id,)
    # The same calls in the caller's own thread (a pool's claim, say).
    assert api.within(10.0).set_port_security_groups(port.id, []) == ()


def test_closed_pool_ports(world: World) -> None:
    """A closed pool's ports: made in one bulk create in no security
    group (port security on: they admit nothing), then one claimed for a
    pod with its groups in the claim's one PUT."""
    api, tag, cloud = world.api, world.tag, world.cloud
    one = api.create_policy_group("one", tag)
    maker = PortMaker(api, network_id=cloud.network_id, subnet_id="")
    pace = Pace(timeout=30.0, per_port=1.0, timeout_max=60.0,
                batch_seconds=0.0, size=10)
    made = poolports.create(maker, pace, tag=tag, count=3, closed=True)
    world.ports += [p.id for p in made]
    for port in made:
        assert poolports.closed(port, tag)
        [seen] = cloud.ports(id=port.id)
        assert seen["security_groups"] == []
        assert seen["port_security_enabled"] is True
        assert seen["device_id"] == poolports.POOL_DEVICE
    pod = str(uuid.uuid4())
    since = time.time()
    claimed = poolports.claim(maker, made[0], device_id=pod,
                              name=f"{tag}:ns/web", groups=[one.id])
    assert claimed.device_id == pod and claimed.security_groups == (one.id,)
    [seen] = cloud.ports(id=made[0].id)
    assert (seen["device_id"], seen["security_groups"]) == (pod, [one.id])
    assert world.requests(since, "PUT", "/v2.0/ports/") == 1


def _rule_quota(cloud: AnyCloud, limit: int) -> None:
    cloud.admin("PUT", f"/v2.0/quotas/{cloud.project_id}", {
        "quota": {"security_group_rule": limit}}).expect(200)


def test_rule_quota(world: World) -> None:
    """The project's rule quota met: :class:`QuotaExceeded` naming it,
    and a bulk makes none of its rules."""
    api, tag, cloud = world.api, world.tag, world.cloud
    group = api.create_policy_group("np", tag)
    details: dict[str, Any] = cloud.admin(
        "GET", f"/v2.0/quotas/{cloud.project_id}/details").expect(200)
    used = int(details["quota"]["security_group_rule"]["used"])
    _rule_quota(cloud, used + 1)
    try:
        with pytest.raises(osa.QuotaExceeded, match="security group rule"):
            api.create_rules(group.id, [
                RuleSpec("ingress", protocol="tcp"),
                RuleSpec("ingress", protocol="udp")])
        assert len(api.policy_group(group.id).rules) == 2  # type: ignore[union-attr]
        [made] = api.create_rules(group.id, [RuleSpec("ingress",
                                                      protocol="udp")])
        assert made.spec.protocol == "udp"
    finally:
        _rule_quota(cloud, 100)
