"""NetworkPolicy's records and refusals on the wire (sgwire): a rule spec
sent and read back compares equal, Neutron's refusals are told apart by
its error types, a malformed answer is an outage. The calls themselves are
proved against the fake and the real Neutron:
tests/functional/test_policy_groups_clouds.py."""
from __future__ import annotations

import pytest

from kuryr_supervisor.controller.openstack import sgwire
from kuryr_supervisor.controller.openstack.sgwire import RuleSpec
from kuryr_supervisor.controller.openstack.wire import (
    OpenStackRefused,
    OpenStackUnavailable,
    QuotaExceeded,
)


def test_spec_canonical_and_body() -> None:
    spec = RuleSpec("ingress", protocol="TCP", port_min=80, port_max=80,
                    remote_ip_prefix="10.1.2.3/16", description="why")
    assert spec.canonical() == RuleSpec("ingress", protocol="tcp",
                                        port_min=80, port_max=80,
                                        remote_ip_prefix="10.1.0.0/16")
    assert spec.body("sg") == {
        "security_group_id": "sg", "direction": "ingress",
        "ethertype": "IPv4", "protocol": "tcp", "port_range_min": 80,
        "port_range_max": 80, "remote_ip_prefix": "10.1.0.0/16",
        "description": "why"}
    # Any address is no prefix, as Neutron stores it.
    assert RuleSpec("egress", remote_ip_prefix="0.0.0.0/0").canonical() == \
        RuleSpec("egress")
    assert RuleSpec("egress").body("sg") == {
        "security_group_id": "sg", "direction": "egress", "ethertype": "IPv4"}


def test_rule_read_back_equals_its_spec() -> None:
    spec = RuleSpec("ingress", protocol="udp", port_min=53, port_max=53,
                    remote_address_group_id="ag")
    answer = dict(spec.body("sg"), id="r1", remote_ip_prefix=None,
                  remote_group_id=None, normalized_cidr=None)
    rule = sgwire.decode_rule(answer)
    assert rule.spec == spec and rule.id == "r1" and \
        rule.security_group_id == "sg"


@pytest.mark.parametrize("obj", [
    {"direction": "ingress"},                      # no id
    {"id": "r", "security_group_id": "s", "direction": "ingress",
     "port_range_min": "eighty"},
    {"id": "r", "security_group_id": "s", "direction": "ingress",
     "remote_ip_prefix": "not a cidr"},
])
def test_malformed_rule_is_an_outage(obj: dict[str, object]) -> None:
    with pytest.raises(OpenStackUnavailable):
        sgwire.decode_rule(obj)


def test_malformed_groups_are_outages() -> None:
    with pytest.raises(OpenStackUnavailable):
        sgwire.decode_group({"name": "no id"})
    with pytest.raises(OpenStackUnavailable):
        sgwire.decode_address_group({"id": "a", "addresses": ["x"]})
    group = sgwire.decode_address_group(
        {"id": "a", "addresses": ["10.0.0.1/32", "10.0.0.2"]})
    assert group.addresses == {"10.0.0.1/32", "10.0.0.2/32"}


def _refusal(status: int, kind: str, message: str = "") -> OpenStackRefused:
    return OpenStackRefused(f"Neutron X: HTTP {status} {{\"NeutronError\": "
                            f"{{\"type\": \"{kind}\", \"message\": "
                            f"\"{message}\"}}}}", status)


def test_refusals_told_apart() -> None:
    for kind in ("SecurityGroupNotFound", "SecurityGroupRuleNotFound",
                 "AddressGroupNotFound", "PortNotFound"):
        missing = sgwire.refined(_refusal(404, kind))
        assert isinstance(missing, sgwire.Missing) and missing.kind == kind
    rule = "3bf332cc-da38-4918-b8f8-577eafd555a6"
    exists = sgwire.refined(_refusal(
        409, "SecurityGroupRuleExists",
        f"Security group rule already exists. Rule id is {rule}."))
    assert isinstance(exists, sgwire.RuleExists) and exists.rule_id == rule
    for kind in ("SecurityGroupInUse", "AddressGroupInUse"):
        assert isinstance(sgwire.refined(_refusal(409, kind)), sgwire.InUse)
    other = sgwire.refined(_refusal(409, "SomethingElse"))
    assert type(other) is sgwire.Conflict
    plain = _refusal(400, "HTTPBadRequest")
    assert sgwire.refined(plain) is plain
    quota = QuotaExceeded("quota", 409)
    assert sgwire.refined(quota) is quota
    # A 404 of something else (a network) is none of these.
    network = _refusal(404, "NetworkNotFound")
    assert sgwire.refined(network) is network


def test_addresses_named() -> None:
    exc = _refusal(400, "AddressesAlreadyExist",
                   "Addresses ['10.30.0.5/32', '10.30.0.6/32'] already "
                   "exist in the address group g.")
    assert sgwire.addresses_named(exc, "AddressesAlreadyExist") == {
        "10.30.0.5/32", "10.30.0.6/32"}
    assert sgwire.addresses_named(exc, "AddressesNotFound") is None
    assert sgwire.addresses_named(
        _refusal(404, "AddressGroupNotFound"), "AddressesNotFound") is None
