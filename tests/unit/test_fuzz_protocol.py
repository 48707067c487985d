"""Property tests: the CNI parser, the CNI WSGI app and the shim against
generated input (``drills.strategies``), in-process, no root needed.

The contract under test: whatever arrives, the answer is a CNI object --
a result, or ``{cniVersion, code, msg}`` with a code from ``errors.WIRE`` --
never a traceback, never HTML, and a refused request changes nothing.
Seeds are fixed (``derandomize``) so a failure reproduces; the long,
randomised runs against a real daemon are ``python3 -m drills fuzz``.
"""
from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from werkzeug.test import Client

from drills import strategies
from drills.fuzz import KNOWN_BUGS
from kuryr_supervisor import errors
from kuryr_supervisor.cni import protocol, shim
from kuryr_supervisor.cni.api import CNIApp
from kuryr_supervisor.cni.locks import ContainerLocks
from kuryr_supervisor.cni.service import CNIService
from kuryr_supervisor.state import SharedState
from tests.unit.test_cni_service import FakeBinding, FakeIpam

CODES = {w.code for w in errors.WIRE.values()}
STATUSES = {w.http_status for w in errors.WIRE.values()}
OWN_NETNS = "/proc/self/ns/net"      # a real netns, safe with FakeBinding
FUZZ = settings(max_examples=250, derandomize=True, deadline=None,
                database=None, suppress_health_check=list(HealthCheck))


def assert_cni_error(obj: Any) -> None:
    assert isinstance(obj, dict), obj
    assert {"cniVersion", "code", "msg"} <= set(obj), obj
    assert obj["code"] in CODES, obj
    assert obj["cniVersion"] in protocol.SUPPORTED_VERSIONS, obj


@FUZZ
@given(strategies.request_bodies([OWN_NETNS]))
def test_parse_raises_only_cni_errors(body: bytes) -> None:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return                          # the app's decoder answers these
    try:
        request = protocol.parse(value)
    except errors.CNIError as exc:
        assert exc.wire.code in CODES
        return
    if request.command in ("ADD", "DEL", "CHECK"):
        assert protocol._CONTAINER_ID.fullmatch(request.container_id)
        assert 0 < len(request.ifname) <= 15 and "/" not in request.ifname


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> tuple[Client, FakeIpam, SharedState]:
    state = SharedState.create(multiprocessing.get_context("fork"))
    ipam = FakeIpam(size=250)
    locks = ContainerLocks(str(tmp_path_factory.mktemp("locks")))
    service = CNIService(lambda: ipam, FakeBinding(ipam), locks, state)
    return Client(CNIApp(service, max_request_bytes=8192)), ipam, state


def test_app_answers_cni_objects_only(app: tuple[Client, FakeIpam, SharedState]
                                      ) -> None:
    client, ipam, state = app

    @FUZZ
    @given(strategies.request_bodies([OWN_NETNS]))
    def each(body: bytes) -> None:
        before = dict(ipam.allocs)
        resp = client.post("/cni", data=body, content_type="application/json")
        data = resp.get_data()
        assert b"traceback" not in data.lower() and b"<html" not in data.lower()
        if resp.status_code == 204:
            assert data == b""
            return
        assert resp.mimetype == "application/json", (resp.status_code, data)
        obj = json.loads(data)
        if resp.status_code == 200:
            assert isinstance(obj, dict) and "cniVersion" in obj
            return
        assert resp.status_code in STATUSES
        assert_cni_error(obj)
        assert ipam.allocs == before, "a refused request changed the store"
    each()
    assert state.cni_failures() == 0


def test_shim_answers_cni_objects_only(tmp_path: Path) -> None:
    """The shim, dialling only dead addresses; known shim bugs are collected
    and reported as xfail, anything else fails."""
    # Dead ends the shim does not wait out (its retry covers a daemon that
    # is restarting: a missing socket file, a refused connection): a socket
    # path under a regular file (ENOTDIR) and an address no one can reach.
    (tmp_path / "file").write_text("")
    dead = [f"unix://{tmp_path}/file/nope.sock", "224.0.0.1:1", "unix:"]
    known: set[str] = set()

    @FUZZ
    @given(strategies.shim_inputs(dead))
    def each(value: tuple[dict[str, str], str]) -> None:
        environ, stdin = value
        try:
            status, out = shim.run(environ, stdin)
        except Exception as exc:
            for kind, fragment, bug in KNOWN_BUGS:
                if type(exc).__name__ == kind and fragment in str(exc):
                    known.add(bug)
                    return
            raise
        obj = json.loads(out)
        if status == 0:
            assert environ.get("CNI_COMMAND") == "VERSION", (environ, out)
            return
        assert status == 1
        assert_cni_error(obj)
    each()
    if known:
        pytest.xfail("; ".join(sorted(known)))
