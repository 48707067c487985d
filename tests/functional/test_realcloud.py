"""The real cloud fixture itself: a real Keystone and Neutron answer, bind
ports and enforce their policy. (The contract both clouds share is
tests/functional/test_cloud_contract.py; the controller daemon against both
clouds, tests/functional/test_controller_clouds.py.)"""
from __future__ import annotations

import uuid

import pytest

from tests.fixtures.daemon import wait_until
from tests.fixtures.realcloud import RealCloud, rest

pytestmark = pytest.mark.realcloud


def port_body(cloud: RealCloud, device: str, **extra: object) -> dict[str, object]:
    return {"port": {"network_id": cloud.network_id, "name": device,
                     "device_id": device, "device_owner": "compute:kuryr",
                     **extra}}


def test_port_create_list_delete(real_cloud: RealCloud) -> None:
    device = f"fixture-{uuid.uuid4()}"
    url = real_cloud.neutron_url + "/v2.0/ports"
    made = rest.request("POST", url, port_body(real_cloud, device),
                        token=real_cloud.token()).expect(201)["port"]
    try:
        assert made["project_id"] == real_cloud.project_id
        [ip] = made["fixed_ips"]
        assert ip["subnet_id"] == real_cloud.subnet_id
        listed = rest.request("GET", url, token=real_cloud.token(),
                              query={"device_id": device}).expect(200)["ports"]
        assert [p["id"] for p in listed] == [made["id"]]
        assert real_cloud.count_ports(device_id=device) == 1
    finally:
        rest.request("DELETE", f"{url}/{made['id']}",
                     token=real_cloud.token()).expect(204)
    assert real_cloud.count_ports(device_id=device) == 0


@pytest.mark.parametrize("host,status,vif", [
    ("node-a", "ACTIVE", "ovs"),
    ("bind-never-a", "DOWN", "binding_failed"),
    ("bind-down-a", "DOWN", "ovs"),
])
def test_test_driver_binds_by_host(real_cloud: RealCloud, host: str,
                                   status: str, vif: str) -> None:
    device = f"bind-{uuid.uuid4()}"
    made = rest.request("POST", real_cloud.neutron_url + "/v2.0/ports",
                        port_body(real_cloud, device, **{"binding:host_id": host}),
                        token=real_cloud.token()).expect(201)["port"]
    seen = real_cloud.admin("GET", f"/v2.0/ports/{made['id']}").expect(200)
    real_cloud.admin("DELETE", f"/v2.0/ports/{made['id']}").expect(204)
    assert made["status"] == status
    # binding:vif_type is shown to admin and service only
    assert "binding:vif_type" not in made
    assert seen["port"]["binding:vif_type"] == vif


def test_test_driver_activates_after_delay(real_cloud: RealCloud) -> None:
    device = f"bind-{uuid.uuid4()}"
    made = rest.request("POST", real_cloud.neutron_url + "/v2.0/ports",
                        port_body(real_cloud, device,
                                  **{"binding:host_id": "bind-delay-1-a"}),
                        token=real_cloud.token()).expect(201)["port"]
    try:
        assert made["status"] == "DOWN"
        wait_until(lambda: real_cloud.admin(
            "GET", f"/v2.0/ports/{made['id']}").expect(200)["port"]["status"]
            == "ACTIVE", 20)
    finally:
        real_cloud.admin("DELETE", f"/v2.0/ports/{made['id']}").expect(204)


def test_member_may_not_bind_nor_delete_compute_ports(
        real_cloud: RealCloud) -> None:
    """Neutron's policy: binding:host_id is for admin or the service role,
    and a ``compute:*`` port is deleted by a member only with a service
    token; the controller's role (policy.yaml) may do both."""
    url = real_cloud.neutron_url + "/v2.0/ports"
    member = real_cloud.token(real_cloud.member_username)
    answer = rest.request("POST", url, port_body(
        real_cloud, "nope", **{"binding:host_id": "node-a"}), token=member)
    assert answer.status == 403, answer
    assert answer.body["NeutronError"]["type"] == "PolicyNotAuthorized"
    made = rest.request("POST", url, port_body(real_cloud, "mine"),
                        token=real_cloud.token()).expect(201)["port"]
    answer = rest.request("DELETE", f"{url}/{made['id']}", token=member)
    assert answer.status == 403, answer
    rest.request("DELETE", f"{url}/{made['id']}",
                 token=real_cloud.token()).expect(204)
