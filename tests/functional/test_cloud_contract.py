"""The cloud contract: what the controller relies on Neutron and Keystone
doing, checked against the fake (``[fake]``) and a real Keystone and
Neutron (``[real]``) alike (tests/fixtures/clouds.py). Whatever the real
one does here, the fake must do too: a failure of ``[fake]`` alone is a bug
in tests/fixtures/openstack.py.

Every port a test makes carries a tag of its own and is removed at the end,
failed or not (the real cloud is shared by the whole run).
"""
from __future__ import annotations

import ipaddress
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.clouds import AnyCloud
from tests.fixtures.realcloud import rest

OWNER = "compute:kuryr"


class Ports:
    """Ports of one test, made as the controller's user, all removed."""

    def __init__(self, cloud: AnyCloud) -> None:
        self.cloud = cloud
        self.tag = f"contract-{uuid.uuid4().hex[:12]}"
        self.url = cloud.neutron_url + "/v2.0/ports"

    def body(self, name: str, **extra: Any) -> dict[str, Any]:
        return {"network_id": self.cloud.network_id, "name": name,
                "device_id": f"{self.tag}-{name}", "device_owner": OWNER,
                "tags": [self.tag], **extra}

    def post(self, body: Any, user: str = "") -> rest.Answer:
        return rest.request("POST", self.url, body,
                            token=self.cloud.token(user))

    def create(self, *names: str, **extra: Any) -> list[dict[str, Any]]:
        answer = self.post({"ports": [self.body(n, **extra) for n in names]})
        return list(answer.expect(201)["ports"])

    def list(self, user: str = "", **query: Any) -> rest.Answer:
        return rest.request("GET", self.url, token=self.cloud.token(user),
                            query=query)

    def mine(self) -> list[dict[str, Any]]:
        return self.cloud.ports(tags=self.tag)

    def cleanup(self) -> None:
        for port in self.mine():
            self.cloud.admin("DELETE", f"/v2.0/ports/{port['id']}")


@pytest.fixture
def ports(any_cloud: AnyCloud) -> Iterator[Ports]:
    made = Ports(any_cloud)
    yield made
    made.cleanup()


def test_single_create(ports: Ports) -> None:
    cloud = ports.cloud
    answer = ports.post({"port": ports.body("one")})
    port = answer.expect(201)["port"]
    assert port["project_id"] == cloud.project_id
    assert port["network_id"] == cloud.network_id
    assert port["device_owner"] == OWNER and port["tags"] == [ports.tag]
    assert port["mac_address"].startswith("fa:16:3e:")
    assert port["status"] == "DOWN"                 # no host: not bound
    [ip] = port["fixed_ips"]
    assert ip["subnet_id"] == cloud.subnet_id
    assert ipaddress.ip_address(ip["ip_address"]) in ipaddress.ip_network(cloud.cidr)
    # every project has a default security group, and new ports are in it
    sgs = rest.request("GET", cloud.neutron_url + "/v2.0/security-groups",
                       token=cloud.token()).expect(200)["security_groups"]
    default = [sg["id"] for sg in sgs if sg["name"] == "default"
               and sg["project_id"] == cloud.project_id]
    assert port["security_groups"] == default


def test_bulk_answers_in_request_order(ports: Ports) -> None:
    names = [f"n{i}" for i in range(6)]
    made = ports.create(*names)
    assert [p["name"] for p in made] == names
    assert len({p["id"] for p in made}) == 6
    assert len({p["fixed_ips"][0]["ip_address"] for p in made}) == 6


@pytest.mark.parametrize("bad,status,kind", [
    ({"network_id": "00000000-0000-0000-0000-000000000000"}, 404,
     "NetworkNotFound"),
    ({"network_id": None}, 400, "HTTPBadRequest"),
])
def test_bulk_is_all_or_nothing(ports: Ports, bad: dict[str, Any],
                                status: int, kind: str) -> None:
    wrong = {k: v for k, v in ports.body("bad").items() if k != "network_id"}
    wrong.update({k: v for k, v in bad.items() if v is not None})
    answer = ports.post({"ports": [ports.body("good"), wrong,
                                   ports.body("good2")]})
    assert answer.status == status, answer
    assert answer.body["NeutronError"]["type"] == kind
    assert set(answer.body["NeutronError"]) == {"type", "message", "detail"}
    assert ports.mine() == []


def test_paging(ports: Ports) -> None:
    """Pages by id; a next link while a page is full (so 4 ports in pages
    of 2 end with an empty third page); a previous link on every page, the
    first one's too; an unknown marker is 404."""
    made = ports.create("a", "b", "c", "d")
    first = ports.list(tags=ports.tag, limit=2).expect(200)
    rels = [link["rel"] for link in first["ports_links"]]
    assert sorted(rels) == ["next", "previous"]
    seen, page, pages = [], first, 0
    while True:
        pages += 1
        seen += [p["id"] for p in page["ports"]]
        nxt = [link["href"] for link in page["ports_links"]
               if link["rel"] == "next"]
        if not nxt:
            break
        page = rest.request("GET", nxt[0], token=ports.cloud.token()).expect(200)
    assert pages == 3 and page["ports"] == []
    assert [link["rel"] for link in page["ports_links"]] == ["previous"]
    assert seen == sorted(p["id"] for p in made)
    unknown = ports.list(tags=ports.tag, limit=2, marker=str(uuid.uuid4()))
    assert unknown.status == 404, unknown
    assert unknown.body["NeutronError"]["type"] == "PortNotFound"


def test_tag_filters(ports: Ports) -> None:
    """``tags`` means all of them (comma-separated or repeated),
    ``tags-any`` any, ``not-tags-any`` none; ``tags`` with ``tags-any``
    together is a 500 (Neutron 29)."""
    t = ports.tag
    a, b = f"{t}-a", f"{t}-b"
    ports.post({"ports": [ports.body("ab", tags=[t, a, b]),
                          ports.body("a", tags=[t, a]),
                          ports.body("b", tags=[t, b])]}).expect(201)

    def names(**query: Any) -> list[str]:
        found = ports.list(**query).expect(200)["ports"]
        return sorted(p["name"] for p in found)
    assert names(tags=f"{t},{a},{b}") == ["ab"]
    assert names(tags=f"{t},{a}") == ["a", "ab"]
    assert names(tags=[t, b]) == ["ab", "b"]
    assert names(**{"tags-any": f"{a},{b}"}) == ["a", "ab", "b"]
    assert names(tags=t, **{"not-tags-any": a}) == ["b"]
    assert names(tags=t, **{"not-tags": f"{a},{b}"}) == ["a", "b"]
    both = ports.list(tags=t, **{"tags-any": a})
    assert both.status == 500, both


def test_error_bodies(ports: Ports) -> None:
    """Neutron's errors are ``NeutronError``; the auth middleware's 401 is
    ``error``; a tag call on a missing port is a 500."""
    cloud, missing = ports.cloud, str(uuid.uuid4())
    for method in ("GET", "DELETE"):
        answer = rest.request(method, f"{ports.url}/{missing}",
                              token=cloud.token())
        assert answer.status == 404, answer
        assert answer.body == {"NeutronError": {
            "type": "PortNotFound", "detail": "",
            "message": f"Port {missing} could not be found."}}
    answer = rest.request("GET", ports.url, token="not-a-token")
    assert answer.status == 401
    assert answer.body == {"error": {
        "code": 401, "title": "Unauthorized",
        "message": "The request you have made requires authentication."}}
    answer = rest.request("PUT", f"{ports.url}/{missing}/tags/x",
                          token=cloud.token())
    assert answer.status == 500
    assert answer.body["NeutronError"]["type"] == "HTTPInternalServerError"


def test_addresses_are_random(ports: Ports) -> None:
    made = ports.create(*[f"r{i}" for i in range(8)])
    addrs = [int(ipaddress.ip_address(p["fixed_ips"][0]["ip_address"]))
             for p in made]
    gateway = int(ipaddress.ip_address(ports.cloud.gateway))
    assert gateway not in addrs
    steps = {b - a for a, b in zip(addrs, addrs[1:], strict=False)}
    assert steps != {1}, addrs               # not handed out in order


def test_default_port_quota(ports: Ports) -> None:
    cloud = ports.cloud
    ports.create("q")
    quota = rest.request("GET", f"{cloud.neutron_url}/v2.0/quotas/"
                         f"{cloud.project_id}/details",
                         token=cloud.token()).expect(200)["quota"]["port"]
    assert quota["limit"] == 500
    assert quota["used"] >= 1 and quota["reserved"] == 0


def test_binding_host_needs_a_role(ports: Ports) -> None:
    """Only admin, the service role or the controller's role (policy.yaml)
    may set or see binding:host_id, or delete a ``compute:*`` port."""
    cloud = ports.cloud
    member = cloud.member_username
    answer = ports.post({"port": ports.body("m", **{"binding:host_id": "node-a"})},
                        user=member)
    assert answer.status == 403, answer
    assert answer.body["NeutronError"]["type"] == "PolicyNotAuthorized"
    assert ports.mine() == []
    [bound] = ports.create("c", **{"binding:host_id": "node-a"})
    assert bound["binding:host_id"] == "node-a"
    assert bound["status"] == "ACTIVE"                  # the driver bound it
    [seen] = ports.list(user=member, tags=ports.tag).expect(200)["ports"]
    assert "binding:host_id" not in seen
    answer = rest.request("DELETE", f"{ports.url}/{bound['id']}",
                          token=cloud.token(member))
    assert answer.status == 403, answer
    rest.request("DELETE", f"{ports.url}/{bound['id']}",
                 token=cloud.token()).expect(204)


def test_what_the_controller_sees(ports: Ports) -> None:
    """Its project's ports and the ports on its network, whoever owns
    them; never another project's port elsewhere. Its quota counts its
    own ports only."""
    cloud = ports.cloud
    quota_url = f"{cloud.neutron_url}/v2.0/quotas/{cloud.project_id}/details"
    used = rest.request("GET", quota_url, token=cloud.token()).expect(200)
    device = f"{ports.tag}-foreign"
    mine = cloud.foreign_port(device, on_pod_network=True, tags=[ports.tag])
    other = cloud.foreign_port(device, on_pod_network=False, tags=[ports.tag])
    try:
        seen = ports.list(device_id=device).expect(200)["ports"]
        assert [p["id"] for p in seen] == [mine["id"]]
        answer = rest.request("GET", f"{ports.url}/{other['id']}",
                              token=cloud.token())
        assert answer.status == 404, answer
        after = rest.request("GET", quota_url, token=cloud.token()).expect(200)
        assert after["quota"]["port"]["used"] == used["quota"]["port"]["used"]
    finally:
        cloud.admin("DELETE", f"/v2.0/ports/{other['id']}")


def test_a_mac_address_is_unique_on_its_network(ports: Ports) -> None:
    """A port may ask for its MAC (the network's owner, a member: the
    controller's project); a second port with that MAC on the network is
    409 ``MacAddressInUse`` naming the MAC, a bulk holding one too (all or
    nothing)."""
    mac = "0e:6b:73:" + ":".join(f"{b:02x}" for b in uuid.uuid4().bytes[:3])
    [made] = ports.create("m1", mac_address=mac)
    assert made["mac_address"] == mac
    answer = ports.post({"port": ports.body("m2", mac_address=mac)})
    assert answer.status == 409, answer
    error = answer.body["NeutronError"]
    assert error["type"] == "MacAddressInUse" and mac in error["message"]
    answer = ports.post({"ports": [ports.body("m3"),
                                   ports.body("m4", mac_address=mac)]})
    assert answer.status == 409, answer
    assert answer.body["NeutronError"]["type"] == "MacAddressInUse"
    assert [p["name"] for p in ports.mine()] == ["m1"]


def test_ports_of_several_devices_in_one_list(ports: Ports) -> None:
    """A repeated ``device_id`` filter is any of them."""
    ports.create("d1", "d2", "d3")
    found = ports.list(device_id=[f"{ports.tag}-d1", f"{ports.tag}-d3"],
                       tags=ports.tag).expect(200)["ports"]
    assert sorted(p["name"] for p in found) == ["d1", "d3"]


def test_tags_set_through_the_tags_api(ports: Ports) -> None:
    """``PUT .../tags`` replaces a port's tags (200, the tags), ``PUT
    .../tags/{tag}`` adds one (201); a port update cannot set them."""
    [port] = ports.create("t")
    url = f"{ports.url}/{port['id']}"
    token = ports.cloud.token()
    answer = rest.request("PUT", url + "/tags",
                          {"tags": [ports.tag, "kuryr-supervisor:x"]},
                          token=token)
    assert answer.expect(200) == {"tags": [ports.tag, "kuryr-supervisor:x"]}
    rest.request("PUT", url + "/tags/more", token=token).expect(201)
    [seen] = ports.mine()
    assert sorted(seen["tags"]) == sorted([ports.tag, "kuryr-supervisor:x",
                                           "more"])
    answer = rest.request("PUT", url, {"port": {"tags": ["q"]}}, token=token)
    assert answer.status == 400, answer


def test_network_and_subnet_by_id(ports: Ports) -> None:
    """The pod network names its project (the controller's: it may choose
    a port's MAC) and its subnets; a network or subnet that does not
    exist is 404 ``NetworkNotFound`` / ``SubnetNotFound``, for a GET and
    for a port asked on it, single or in bulk."""
    cloud = ports.cloud
    base = cloud.neutron_url + "/v2.0"
    net = rest.request("GET", f"{base}/networks/{cloud.network_id}",
                       token=cloud.token()).expect(200)["network"]
    assert net["project_id"] == cloud.project_id
    assert cloud.subnet_id in net["subnets"]
    missing = str(uuid.uuid4())
    for path, kind in ((f"networks/{missing}", "NetworkNotFound"),
                       (f"subnets/{missing}", "SubnetNotFound")):
        answer = rest.request("GET", f"{base}/{path}", token=cloud.token())
        assert answer.status == 404, answer
        assert answer.body["NeutronError"]["type"] == kind
    for body in ({"port": ports.body("s", fixed_ips=[
            {"subnet_id": missing}])}, {"ports": [ports.body("s1"), ports.body(
                "s2", fixed_ips=[{"subnet_id": missing}])]}):
        answer = ports.post(body)
        assert answer.status == 404, answer
        assert answer.body["NeutronError"]["type"] == "SubnetNotFound"
    assert ports.mine() == []


@pytest.fixture
def neutron_ports(any_neutron: AnyCloud) -> Iterator[Ports]:
    made = Ports(any_neutron)
    yield made
    for port in any_neutron.ports(device_owner=OWNER):
        if port["device_id"].startswith(made.tag):
            any_neutron.admin("DELETE", f"/v2.0/ports/{port['id']}")


def test_tags_of_a_create_without_the_bulk_tags_driver(
        neutron_ports: Ports) -> None:
    """With ML2's ``tag_ports_during_bulk_creation`` a create's tags are
    kept, single or bulk; without it (Neutron's default) they are
    dropped, with no error: only the tags API sets them."""
    ports = neutron_ports
    cloud = ports.cloud
    single = ports.post({"port": ports.body("one")}).expect(201)["port"]
    bulk = ports.create("b1", "b2")
    kept = [ports.tag] if cloud.bulk_tags else []
    assert [p["tags"] for p in (single, *bulk)] == [kept] * 3
    rest.request("PUT", f"{ports.url}/{single['id']}/tags",
                 {"tags": [ports.tag]}, token=cloud.token()).expect(200)
    assert sorted(p["name"] for p in ports.mine()) == sorted(["one"] + (
        ["b1", "b2"] if cloud.bulk_tags else []))


def test_the_bulk_tags_extension_says_whether_tags_are_kept(
        neutron_ports: Ports) -> None:
    """``GET /v2.0/extensions/tag-ports-during-bulk-creation``: 200 where
    ML2's ``tag_ports_during_bulk_creation`` driver is on, 404 where not."""
    cloud = neutron_ports.cloud
    answer = rest.request(
        "GET", f"{cloud.neutron_url}/v2.0/extensions/"
        "tag-ports-during-bulk-creation", token=cloud.token())
    assert answer.status == (200 if cloud.bulk_tags else 404), answer


def test_choosing_a_mac_is_a_policy(ports: Ports) -> None:
    """Neutron's policy may refuse ``mac_address`` (403 naming it) to a
    user it lets make ports (``kuryr-nomac``: an operator's policy, or a
    user outside the network's project); without it the same create is
    made."""
    user = ports.cloud.nomac_username
    mac = "0e:6b:73:" + ":".join(f"{b:02x}" for b in uuid.uuid4().bytes[:3])
    answer = ports.post({"port": ports.body("m", mac_address=mac)}, user=user)
    assert answer.status == 403, answer
    error = answer.body["NeutronError"]
    assert error["type"] == "PolicyNotAuthorized"
    assert "mac_address" in error["message"], error
    assert ports.mine() == []
    ports.post({"port": ports.body("m")}, user=user).expect(201)
