"""A closed pool port (:mod:`kuryr_supervisor.controller.pools.portpools`)
admits nothing on ML2/OVN: made as the pools make it (in no security
group, port security on), its logical switch port is in Neutron's drop
port group and in no security group's port group, so no ACL allows a
packet to or from it; the claim that gives it a group puts it in that
group's port group. Read from the real OVN Northbound database that the
real Neutron (ML2/OVN) writes.
"""
from __future__ import annotations

import uuid

import pytest

from kuryr_supervisor.controller.pools import poolports
from tests.fixtures.ovn.stack import OvnStack, wait_for

pytestmark = [pytest.mark.privileged, pytest.mark.realcloud]
DROP = "neutron_pg_drop"


def port_groups_of(stack: OvnStack, port_id: str) -> set[str]:
    """The names of the OVN port groups the port's switch port is in."""
    nbctl = stack.fabric.central.nbctl
    [lsp] = nbctl("--bare", "--columns=_uuid", "find", "logical_switch_port",
                  f"name={port_id}").split()
    found = set()
    for row in nbctl("--bare", "--columns=name,ports", "list",
                     "port_group").strip().split("\n\n"):
        name, _, ports = row.strip().partition("\n")
        if lsp in ports.split():
            found.add(name.strip())
    return found


def test_a_closed_port_is_in_no_group_but_ovns_drop_group(
        ovn_stack: OvnStack) -> None:
    stack = ovn_stack
    made = stack.admin("POST", "/v2.0/ports", {"port": {
        "network_id": stack.network_id, "security_groups": [],
        "name": f"test:{poolports.CLOSED_NAME}",
        "device_id": poolports.POOL_DEVICE}}).expect(201)["port"]
    try:
        assert made["port_security_enabled"] is True
        assert made["security_groups"] == []
        wait_for(lambda: port_groups_of(stack, made["id"]) == {DROP}, 30,
                 lambda: f"port groups: {port_groups_of(stack, made['id'])}")
        [default] = stack.admin(
            "GET", "/v2.0/security-groups", name="default",
            project_id=made["project_id"]).expect(200)["security_groups"]
        stack.admin("PUT", f"/v2.0/ports/{made['id']}", {"port": {
            "device_id": str(uuid.uuid4()),
            "security_groups": [default["id"]]}}).expect(200)
        want = {DROP, "pg_" + default["id"].replace("-", "_")}
        wait_for(lambda: port_groups_of(stack, made["id"]) == want, 30,
                 lambda: f"port groups: {port_groups_of(stack, made['id'])}")
    finally:
        stack.admin("DELETE", f"/v2.0/ports/{made['id']}").expect(204, 404)
