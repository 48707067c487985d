"""The CNI WSGI app through werkzeug's test client: JSON always, WIRE statuses."""
from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest
from werkzeug.test import Client

from kuryr_supervisor import errors
from kuryr_supervisor.cni.api import CNIApp
from kuryr_supervisor.cni.locks import ContainerLocks
from kuryr_supervisor.cni.service import CNIService
from kuryr_supervisor.state import SharedState
from tests.unit.test_cni_service import FakeBinding, FakeIpam

NETNS = "/proc/self/ns/net"


@pytest.fixture
def state() -> SharedState:
    return SharedState.create(multiprocessing.get_context("fork"))


@pytest.fixture
def client(tmp_path: Path, state: SharedState) -> Client:
    ipam = FakeIpam()
    service = CNIService(lambda: ipam, FakeBinding(ipam),
                         ContainerLocks(str(tmp_path)), state)
    return Client(CNIApp(service, max_request_bytes=4096))


def cni(command: str = "ADD", **env: str) -> dict[str, Any]:
    return {"env": {"CNI_COMMAND": command, "CNI_CONTAINERID": "c1",
                    "CNI_IFNAME": "eth0", "CNI_NETNS": NETNS, **env},
            "config": {"cniVersion": "1.0.0", "name": "n", "type": "kuryr-cni"}}


def post(client: Client, data: bytes | str) -> tuple[int, Any]:
    resp = client.post("/cni", data=data, content_type="application/json")
    assert resp.mimetype == "application/json" or resp.status_code == 204
    return resp.status_code, resp.get_json(silent=True)


def test_add_and_del(client: Client, state: SharedState) -> None:
    status, body = post(client, json.dumps(cni()))
    assert status == 200 and body["cniVersion"] == "1.0.0"
    assert post(client, json.dumps(cni("DEL"))) == (204, None)
    assert state.cni_failures() == 0


@pytest.mark.parametrize("data, status, code", [
    (b"", 400, 6),
    (b"not json", 400, 6),
    (b"[1, 2", 400, 6),
    (b"[" * 5000 + b"]" * 5000, 413, 6),      # over 4096 bytes
    (b"x" * 100_000, 413, 6),
    (json.dumps(cni("FROB")), 400, 4),
    (json.dumps(cni(CNI_CONTAINERID="../etc")), 400, 4),
    (json.dumps(cni(CNI_IFNAME="a" * 16)), 400, 4),
    (json.dumps(cni(CNI_NETNS="/no/such/ns")), 404, 3),
])
def test_bad_requests(client: Client, state: SharedState, data: Any,
                      status: int, code: int) -> None:
    got_status, body = post(client, data)
    assert (got_status, body["code"]) == (status, code)
    assert set(body) == {"cniVersion", "code", "msg", "details"}
    assert state.cni_failures() == 0


def test_deep_nesting_is_a_decode_error(tmp_path: Path, state: SharedState) -> None:
    ipam = FakeIpam()
    app = CNIApp(CNIService(lambda: ipam, FakeBinding(ipam),
                            ContainerLocks(str(tmp_path)), state),
                 max_request_bytes=1 << 20)
    resp = Client(app).post("/cni", data=b"[" * 200_000 + b"]" * 200_000)
    assert resp.status_code == 400 and resp.get_json()["code"] == 6


def test_routing_errors_are_json(client: Client) -> None:
    for resp in (client.get("/nope"), client.get("/cni"),
                 client.post("/version")):
        assert resp.status_code == 404
        assert resp.mimetype == "application/json"
        assert resp.get_json()["code"] == 4


def test_version_endpoint(client: Client) -> None:
    body = client.get("/version").get_json()
    assert body["supportedVersions"] == ["0.3.1", "0.4.0", "1.0.0", "1.1.0"]


def test_unexpected_exception_is_json_500(tmp_path: Path, state: SharedState) -> None:
    class Broken(CNIService):
        def handle(self, request: Any, **kw: Any) -> Any:
            raise ZeroDivisionError("oops")
    ipam = FakeIpam()
    app = CNIApp(Broken(lambda: ipam, FakeBinding(ipam),
                        ContainerLocks(str(tmp_path)), state))
    resp = Client(app).post("/cni", data=json.dumps(cni()))
    assert resp.status_code == 500 and resp.get_json()["code"] == 100


def test_statuses_come_from_the_wire_table(client: Client) -> None:
    post(client, json.dumps(cni()))
    other = cni()
    other["config"]["name"] = "other"      # the same attachment, another netconf
    status, body = post(client, json.dumps(other))
    assert (status, body["code"]) == (errors.WIRE[errors.AlreadyExists].http_status,
                                      102)
