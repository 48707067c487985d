"""The Python shim's judgement of the daemon's answer and of its input.

A 2xx answer must be a valid result of the command (code 999 otherwise),
judged by the table the Go shim's ``go test`` reads too
(``cmd/kuryr-cni/testdata/results.json``), so both say the same words; an
HTTP answer must be whole; a ``CNI_*`` variable that is not UTF-8 is
code 4 before anything is sent, in the daemon's words.
"""
from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable
from typing import Any

import pytest

from kuryr_supervisor import errors
from kuryr_supervisor.cni import protocol, shim
from tests.fixtures.clients import REPO

RESULTS = json.loads((REPO / "cmd" / "kuryr-cni" / "testdata" / "results.json")
                     .read_text(encoding="utf-8"))


def test_the_table_is_substantial() -> None:
    assert len(RESULTS) >= 30
    assert {c["command"] for c in RESULTS} >= {"ADD", "DEL", "CHECK", "GC", "STATUS"}
    assert sum(not c["problem"] for c in RESULTS) >= 5   # and valid ones pass


@pytest.mark.parametrize("case", RESULTS, ids=[c["name"] for c in RESULTS])
def test_result_problem(case: dict[str, Any]) -> None:
    got = shim.result_problem(case["command"], case["cniVersion"],
                              case["body"].encode("utf-8"))
    assert got == case["problem"]


def test_result_that_is_not_utf8() -> None:
    body = b'{"cniVersion": "1.0.0", "x": "\xff"}'
    assert shim.result_problem("ADD", "1.0.0", body) == "the result is not UTF-8"


def test_the_daemons_results_are_valid() -> None:
    """What the daemon answers ADD with, in every version, passes."""
    from kuryr_supervisor.cni import results

    for version in protocol.SUPPORTED_VERSIONS:
        request = protocol.Request(
            command="ADD", cni_version=version, netconf={"dns": {}},
            container_id="c1", ifname="eth0", netns="/var/run/netns/x")
        result = results.add_result(
            request, host_ifname="tap1", host_mac="02:00:00:00:00:01",
            pod_mac="02:00:00:00:00:02", mtu=1400,
            address=ipaddress.IPv4Interface("10.0.0.5/24"),
            gateway=ipaddress.IPv4Address("10.0.0.1"))
        body = json.dumps(result).encode()
        assert shim.result_problem("ADD", version, body) == "", version


@pytest.fixture
def answering(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """call_daemon's exchange answers the next of these bytes."""
    answers: list[bytes] = []

    def exchange(address: str, request: bytes, deadline: float,
                 clock: Callable[[], float]) -> bytes:
        return answers.pop(0)

    monkeypatch.setattr(shim, "_exchange", exchange)
    return answers


NETCONF = '{"cniVersion": "0.4.0", "daemon_socket": "unix:///x"}'


@pytest.mark.parametrize("command, answer, details", [
    ("ADD", b"HTTP/1.0 200 OK\r\n\r\n<html>", "the result is not JSON"),
    ("ADD", b"HTTP/1.0 201 Created\r\n\r\n", "the answer has no result"),
    ("ADD", b"HTTP/1.0 200 OK\r\n\r\n[]", "the result is not a JSON object"),
    ("DEL", b"HTTP/1.0 200 OK\r\n\r\nok\n",
     "DEL prints nothing on success, but the answer had 2 bytes"),
])
def test_garbage_success_is_code_999(answering: list[bytes], command: str,
                                     answer: bytes, details: str) -> None:
    answering.append(answer)
    status, out = shim.run({"CNI_COMMAND": command}, NETCONF)
    code = answer.split()[1].decode()
    assert status == 1 and json.loads(out) == {
        "cniVersion": "0.4.0", "code": 999, "details": details,
        "msg": f"kuryr-supervisor answered HTTP {code} with an invalid "
               f"{command} result"}


def test_a_valid_result_is_printed_as_written(answering: list[bytes]) -> None:
    result = b'{"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.1.0.5/24"}]}'
    answering.append(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n\n%s\n"
                     % (len(result) + 2, result))
    assert shim.run({"CNI_COMMAND": "ADD"}, NETCONF) == (0, result.decode())
    answering.append(b"HTTP/1.0 204 No Content\r\n\r\n")
    assert shim.run({"CNI_COMMAND": "DEL"}, NETCONF) == (0, "")


@pytest.mark.parametrize("answer, status", [
    (b"HTTP/1.0 204 No Content\r\ncontent-length:  0\r\n\r\n", 204),
    (b"HTTP/1.1 400 Bad\r\nContent-Length: 2\r\n\r\n{}", 400),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 40\r\n\r\n{\"cniVersion\"", None),
    (b"HTTP/1.0 200 OK\r\nContent-Length: x\r\n\r\n", None),
    (b"HTTP/1.0 204 No Content\r\n", None),           # the head cut short
    (b"HTTP/1.0 2040 No Content\r\n\r\n", None),
    (b"SSH-2.0-OpenSSH\r\n\r\n", None),
    (b"", None),
])
def test_parse_answer(answer: bytes, status: int | None) -> None:
    if status is None:
        with pytest.raises(shim.ShimError) as info:
            shim._parse_answer("unix:///x", answer)
        assert info.value.code == 11
        assert info.value.details == "unix:///x: no valid HTTP answer"
    else:
        assert shim._parse_answer("unix:///x", answer)[0] == status


@pytest.mark.parametrize("key", shim.CNI_KEYS)
def test_non_utf8_cni_variable_is_code_4(monkeypatch: pytest.MonkeyPatch,
                                         key: str) -> None:
    def no_daemon(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the daemon was called")

    monkeypatch.setattr(shim, "call_daemon", no_daemon)
    env = {"CNI_COMMAND": "ADD", key: "a\udcffb"}   # how os.environ holds 0xff
    status, out = shim.run(env, NETCONF)
    assert status == 1 and json.loads(out) == {
        "cniVersion": "0.4.0", "code": 4, "details": "",
        "msg": f"{key} is not valid UTF-8"}


def test_the_daemon_says_the_same_of_non_utf8() -> None:
    """The shim's words are the daemon's (protocol.parse), so a runtime
    sees one message whichever answered."""
    body = {"env": {"CNI_COMMAND": "ADD", "CNI_ARGS": "a\udcffb"},
            "config": {"cniVersion": "0.4.0"}}
    with pytest.raises(errors.InvalidEnvironment) as info:
        protocol.parse(body)
    assert info.value.to_cni("0.4.0") == json.loads(shim.run(
        {"CNI_COMMAND": "ADD", "CNI_ARGS": "a\udcffb"}, NETCONF)[1])


def test_other_variables_are_not_checked(answering: list[bytes]) -> None:
    answering.append(b"HTTP/1.0 204 No Content\r\n\r\n")
    env = {"CNI_COMMAND": "DEL", "HOME": "\udcff", "TRACEPARENT": "00-\udcff-01"}
    assert shim.run(env, NETCONF) == (0, "")
