"""Conformance: the compiled (Go) and the Python kuryr-cni keep one contract.

Every test here runs twice, once per shim (``shim_factory`` is parametrized),
each exec'd as the runtime would (minimal environment, netconf on stdin)
against a real in-process CNI server on a fresh bridge and real namespaces;
the shim-only cases of ``test_shim.py`` and the restart cases of
``test_shim_restart.py`` run against both too. The shim's trust check is
tested with a real listener run as ``nobody``; an answer that is not a
valid result (code 999) with a real listener.
"""
from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kuryr_supervisor.cni import protocol
from tests.functional.cni_harness import (
    Daemon,
    Namespaces,
    ip_json,
    run_shim,
    running_daemon,
    unique,
)

pytestmark = pytest.mark.privileged


@pytest.fixture
def daemon(tmp_path: Any) -> Iterator[Daemon]:
    with running_daemon(str(tmp_path)) as d:
        yield d


@pytest.fixture
def shim(tmp_path: Any, shim_factory: Callable[[str], str]) -> str:
    directory = tmp_path / "cni-bin"
    directory.mkdir()
    return shim_factory(str(directory))


def eth0_addresses(ns: str) -> set[str]:
    return {f"{a['local']}/{a['prefixlen']}"
            for link in ip_json("-n", ns, "addr") if link["ifname"] == "eth0"
            for a in link["addr_info"] if a["family"] == "inet"}


def test_version_is_local_and_matches_the_daemon(shim: str, tmp_path: Any) -> None:
    conf = {"cniVersion": "0.4.0", "daemon_socket": f"unix://{tmp_path}/none.sock"}
    status, body = run_shim(shim, "VERSION", conf)
    assert status == 0
    assert body == {"cniVersion": "0.4.0",
                    "supportedVersions": list(protocol.SUPPORTED_VERSIONS)}
    status, body = run_shim(shim, "VERSION", "not json")
    assert status == 0 and body["cniVersion"] == protocol.LATEST


@pytest.mark.parametrize("stdin, code", [("{not json", 6), ("[1]", 6),
                                         ('{"cniVersion": "1.0.0", "timeout": -1}', 7),
                                         ('{"cniVersion": "1.0.0", "timeout": 1e12}', 7),
                                         ('{"cniVersion": "1.0.0", "daemon_socket": 1}', 7)])
def test_local_refusals(shim: str, stdin: str, code: int) -> None:
    status, body = run_shim(shim, "ADD", stdin, container_id="c1",
                            netns="/proc/self/ns/net")
    assert status == 1 and body["code"] == code and body["msg"]


@pytest.mark.parametrize("version", protocol.SUPPORTED_VERSIONS)
def test_add_check_del_del_in_every_version(shim: str, daemon: Daemon,
                                            namespaces: Namespaces,
                                            version: str) -> None:
    ns, cid = namespaces.create(), unique("c", 20)
    netns = f"/var/run/netns/{ns}"
    status, result = run_shim(shim, "ADD", daemon.netconf(version),
                              container_id=cid, netns=netns)
    assert status == 0, result
    assert result["cniVersion"] == version
    address = result["ips"][0]["address"]
    assert ipaddress.IPv4Interface(address).ip in daemon.subnet
    assert eth0_addresses(ns) == {address}
    assert ("version" in result["ips"][0]) == (version in ("0.3.1", "0.4.0"))
    if version != "0.3.1":                       # CHECK exists from 0.4.0
        status, out = run_shim(shim, "CHECK", {**daemon.netconf(version),
                                               "prevResult": result},
                               container_id=cid, netns=netns)
        assert (status, out) == (0, None)
    for _ in range(2):                           # DEL, and DEL again
        status, out = run_shim(shim, "DEL", daemon.netconf(version),
                               container_id=cid, netns=netns)
        assert (status, out) == (0, None)
    assert eth0_addresses(ns) == set() and daemon.ipam.list() == []
    assert daemon.state.cni_failures() == 0


@pytest.mark.parametrize("version", ["0.2.0", "1.0", "2.0.0", "", None])
def test_unsupported_version_is_refused_before_plumbing(
        shim: str, daemon: Daemon, namespaces: Namespaces,
        version: str | None) -> None:
    ns, cid = namespaces.create(), unique("c", 20)
    conf = daemon.netconf()
    conf["cniVersion"] = version
    status, body = run_shim(shim, "ADD", conf, container_id=cid,
                            netns=f"/var/run/netns/{ns}")
    assert status == 1 and body["code"] == 1, body
    assert body["cniVersion"] == protocol.LATEST
    assert ip_json("-n", ns, "link", "show", "eth0") == []
    assert daemon.ipam.list() == [] and daemon.state.cni_failures() == 0


def test_daemon_errors_pass_through(shim: str, daemon: Daemon,
                                    namespaces: Namespaces) -> None:
    ns, cid = namespaces.create(), unique("c", 20)
    netns = f"/var/run/netns/{ns}"
    assert run_shim(shim, "ADD", daemon.netconf("1.0.0"), container_id=cid,
                    netns=netns)[0] == 0
    status, body = run_shim(shim, "ADD", daemon.netconf("1.0.0", {"dns": {}}),
                            container_id=cid, netns=netns)
    assert status == 1 and body["code"] == 102 and body["cniVersion"] == "1.0.0"
    status, body = run_shim(shim, "ADD", daemon.netconf("1.0.0"), container_id="-bad",
                            netns=netns)
    assert status == 1 and body["code"] == 4
    assert run_shim(shim, "DEL", daemon.netconf("1.0.0"), container_id=cid,
                    netns=netns) == (0, None)


@pytest.mark.parametrize("key", ["CNI_ARGS", "CNI_CONTAINERID", "CNI_NETNS"])
def test_non_utf8_variable_is_code_4_in_the_daemons_words(
        shim: str, daemon: Daemon, namespaces: Namespaces, key: str) -> None:
    """Both shims answer it alike, before sending anything (the Go shim
    once forwarded U+FFFD in its place); with a daemon there or not."""
    extra = {key: "K8S_POD_NAME=a\udcffb"}        # the byte 0xff
    netns = f"/var/run/netns/{namespaces.create()}"
    for address in (daemon.address, "unix:///nonexistent/cni.sock"):
        conf = {**daemon.netconf("1.0.0"), "daemon_socket": address}
        status, body = run_shim(shim, "ADD", conf, container_id="c1",
                                netns=netns, extra_env=extra)
        assert status == 1 and body == {
            "cniVersion": "1.0.0", "code": 4, "details": "",
            "msg": f"{key} is not valid UTF-8"}, body
    assert daemon.ipam.list() == [] and daemon.state.cni_failures() == 0


GARBAGE = [
    ("ADD", b"HTTP/1.0 200 OK\r\n\r\n<html>oops</html>", "the result is not JSON"),
    ("ADD", b'HTTP/1.0 200 OK\r\n\r\n{"cniVersion": "1.0.0"}',
     "the result has no ips (an ADD gives the pod an address)"),
    ("ADD", b'HTTP/1.0 200 OK\r\n\r\n{"cniVersion": "0.4.0", "ips": '
            b'[{"version": "4", "address": "10.0.0.2/24"}]}',
     "the result's cniVersion 0.4.0 is not the request's 1.0.0"),
    ("DEL", b"HTTP/1.0 200 OK\r\n\r\n{}",
     "DEL prints nothing on success, but the answer had 2 bytes"),
]


@pytest.mark.parametrize("command, answer, details", GARBAGE)
def test_a_success_that_is_not_a_result_is_code_999(
        shim: str, tmp_path: Any, command: str, answer: bytes,
        details: str) -> None:
    """Not exit 0 with garbage on stdout: the runtime would take it as a
    result (or as nothing to undo)."""
    path = str(tmp_path / "garbage.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            while conn.recv(65536):
                pass
            conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        status, body = run_shim(shim, command, {
            "cniVersion": "1.0.0", "name": "kuryr", "daemon_socket": f"unix://{path}"},
            container_id="c1", netns="/proc/self/ns/net")
    finally:
        thread.join(5)
        listener.close()
    assert status == 1 and body == {
        "cniVersion": "1.0.0", "code": 999, "details": details,
        "msg": f"kuryr-supervisor answered HTTP 200 with an invalid {command} result"}


@pytest.fixture
def open_dir() -> Iterator[str]:
    """A directory ``nobody`` can create a socket in."""
    path = tempfile.mkdtemp(prefix="ksvc-peer-", dir="/tmp")
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


LISTENER = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1]); s.listen(1)
print("listening", flush=True)
conn, _ = s.accept()
conn.settimeout(5)
data = b""
try:
    while chunk := conn.recv(65536):
        data += chunk
except OSError:
    pass
print(len(data), flush=True)
try:
    conn.sendall(b'HTTP/1.0 200 OK\\r\\n\\r\\n{"cniVersion": "1.0.0", "forged": true}')
except OSError:
    pass
"""


def test_socket_not_served_by_root_gets_nothing(shim: str, open_dir: str) -> None:
    """A user who replaced the socket neither reads the request nor forges
    the result: the shim checks its peer (SO_PEERCRED) before sending."""
    path = os.path.join(open_dir, "cni.sock")
    listener = subprocess.Popen(
        ["/usr/sbin/runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c",
         LISTENER, path], stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout is not None
        assert listener.stdout.readline().strip() == "listening"
        started = time.monotonic()
        status, body = run_shim(shim, "ADD", {"cniVersion": "1.0.0", "name": "kuryr",
                                              "daemon_socket": f"unix://{path}"},
                                container_id="c1", netns="/proc/self/ns/net")
        assert status == 1 and body["code"] == 11, body
        assert "not served by root" in body["msg"]
        assert "uid 65534" in body["details"]
        assert listener.stdout.readline().strip() == "0"     # not one byte sent
        assert time.monotonic() - started < 10
    finally:
        listener.kill()
        listener.wait(5)
