"""Malformed and hostile input, over the real socket and through the shim:
each gets its CNI code, the failure budget stays at 0, nothing on disk moves,
and the daemon keeps serving."""
from __future__ import annotations

import http.client
import ipaddress
import json
import socket
from typing import Any

import pytest

from tests.functional.cni_harness import (
    Daemon,
    Namespaces,
    ip_json,
    random_subnet,
    running_daemon,
    unique,
)

pytestmark = pytest.mark.privileged


def raw_post(daemon: Daemon, body: bytes, *, path: str = "/cni",
             method: str = "POST") -> tuple[int, Any]:
    conn = http.client.HTTPConnection("localhost", timeout=10)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(daemon.socket_path)
    conn.sock = sock
    conn.request(method, path, body=body,
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    assert resp.getheader("Content-Type") == "application/json", data
    return resp.status, json.loads(data)


def raw_bytes(daemon: Daemon, payload: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(daemon.socket_path)
        sock.sendall(payload)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_bad_input_is_refused_with_the_right_code(tmp_path: Any,
                                                  namespaces: Namespaces) -> None:
    ns = f"/var/run/netns/{namespaces.create()}"
    cid = unique("c", 20)       # host veth names are global: never reuse ids
    with running_daemon(str(tmp_path), max_request_bytes=64 * 1024) as d:
        d.files()                      # let the store create its files first
        before = d.files()
        good = {"env": {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": cid,
                        "CNI_IFNAME": "eth0", "CNI_NETNS": ns},
                "config": d.netconf()}

        def env(**kw: Any) -> bytes:
            env_ = {k: v for k, v in {**good["env"], **kw}.items() if v is not None}
            return json.dumps({"env": env_, "config": good["config"]}).encode()

        over_http = [
            (b"not json", 400, 6),
            (b"", 400, 6),
            (b"{" * 70_000, 413, 6),
            (json.dumps({"env": {}, "config": d.netconf()}).encode(), 400, 4),
            (env(CNI_COMMAND="FROB"), 400, 4),
            (env(CNI_CONTAINERID=None), 400, 4),
            (env(CNI_IFNAME=None), 400, 4),
            (env(CNI_NETNS=None), 400, 4),
            (env(CNI_CONTAINERID="../../etc/passwd"), 400, 4),
            (env(CNI_IFNAME="abcdefghijklmnop"), 400, 4),
            (env(CNI_NETNS="/var/run/netns/ksvc-does-not-exist"), 404, 3),
            (env(CNI_NETNS="/etc/hostname"), 400, 4),
            (json.dumps({**good, "config": d.netconf("0.1.0")}).encode(), 400, 1),
        ]
        for body, status, code in over_http:
            got = raw_post(d, body)
            assert (got[0], got[1]["code"]) == (status, code), (body[:80], got)
        assert raw_post(d, b"{}", path="/nope")[1]["code"] == 4
        assert raw_post(d, b"", path="/cni", method="GET")[1]["code"] == 4

        # garbage at the HTTP level: still a JSON error, never HTML
        reply = raw_bytes(d, b"BLAH\r\n\r\n")        # HTTP/0.9: no headers
        assert json.loads(reply)["code"] == 6
        for junk in (b"GET /cni HTTP/7.1\r\n\r\n",
                     b"POST /cni HTTP/1.0\r\n" + b"X: y\r\n" * 200 + b"\r\n",
                     b"POST /" + b"a" * 70_000 + b" HTTP/1.0\r\n\r\n"):
            reply = raw_bytes(d, junk)
            assert b"<html" not in reply.lower()
            if reply.startswith(b"HTTP/"):        # else an HTTP/0.9 answer
                head, _, reply = reply.partition(b"\r\n\r\n")
                assert b"application/json" in head
            assert json.loads(reply)["code"] == 6

        through_shim: list[tuple[str, dict[str, Any] | str, dict[str, str],
                                 int]] = [
            ("ADD", "not json", {}, 6),
            ("ADD", d.netconf(), {"container_id": "bad/id"}, 4),
            ("ADD", d.netconf(), {"ifname": "x" * 16}, 4),
            ("ADD", d.netconf(), {"netns": "/var/run/netns/ksvc-nope"}, 3),
            ("ADD", d.netconf("0.2.0"), {}, 1),
            ("FROB", d.netconf(), {}, 4),
            ("CHECK", d.netconf(), {}, 7),
        ]
        for command, conf, kw, code in through_shim:
            status, err = d.shim(command, conf,
                                 container_id=kw.get("container_id", cid),
                                 netns=kw.get("netns", ns),
                                 ifname=kw.get("ifname", "eth0"))
            assert (status, err["code"]) == (1, code), (command, kw, err)

        assert d.state.cni_failures() == 0
        assert d.files() == before
        assert ip_json("-n", ns.rsplit("/", 1)[1], "link", "show", "eth0") == []
        # and it still works
        status, res = d.shim("ADD", d.netconf(), container_id=cid, netns=ns)
        assert status == 0, res


def test_subnet_exhausted_is_code_101(tmp_path: Any, namespaces: Namespaces) -> None:
    subnet = ipaddress.IPv4Network(
        f"{random_subnet().network_address}/30")     # gateway + one pod
    with running_daemon(str(tmp_path), subnet=subnet) as d:
        first = f"/var/run/netns/{namespaces.create()}"
        second = f"/var/run/netns/{namespaces.create()}"
        assert d.shim("ADD", d.netconf(), container_id=unique("c", 20),
                      netns=first)[0] == 0
        before = d.files()
        status, err = d.shim("ADD", d.netconf(), container_id=unique("c", 20),
                             netns=second)
        assert (status, err["code"]) == (1, 101)
        assert d.state.cni_failures() == 0
        assert d.files() == before
        assert ip_json("-n", second.rsplit("/", 1)[1], "link", "show", "eth0") == []


def test_runtime_mistakes_are_client_errors_and_leave_nothing(
        tmp_path: Any, namespaces: Namespaces) -> None:
    """Each of these once reached netlink or SQLite and came back as an
    internal failure (code 100, counted): a kernel name template, a
    non-UTF-8 byte, the host's own namespace, a second default route,
    NaN and duplicate keys."""
    name = namespaces.create()
    ns = f"/var/run/netns/{name}"
    cid = unique("c", 20)
    with running_daemon(str(tmp_path)) as d:
        status, res = d.shim("ADD", d.netconf(), container_id=cid, netns=ns)
        assert status == 0, res
        before = d.ipam.list()
        host_links = {link["ifname"] for link in ip_json("link")}
        through_shim: list[tuple[dict[str, Any], int]] = [
            ({"ifname": "eth%d"}, 4),
            ({"ifname": "eth 1"}, 4),
            ({"ifname": "éééééééé"}, 4),                    # 16 bytes
            ({"args": "K8S_POD_NAME=a\udcffb"}, 4),          # byte 0xff
            ({"netns": "/proc/self/ns/net"}, 4),
            ({"netns": "/proc/1/ns/net"}, 4),
            ({"ifname": "eth1"}, 102),        # the netns has a default route
        ]
        for kw, code in through_shim:
            other = unique("c", 20)
            status, err = d.shim("ADD", d.netconf(),
                                 container_id=cid if not kw else other,
                                 netns=kw.get("netns", ns),
                                 ifname=kw.get("ifname", "eth0"),
                                 args=kw.get("args", ""))
            assert (status, err["code"]) == (1, code), (kw, err)
        # the same attachment with another netconf (a replay needs the same)
        status, err = d.shim("ADD", d.netconf(extra={"dns": {}}),
                             container_id=cid, netns=ns)
        assert (status, err["code"]) == (1, 102), err
        netconf = json.dumps(d.netconf())
        for text in (netconf.replace('"kuryr"', '"kuryr", "mtu": NaN'),
                     netconf.replace('"kuryr"', '"kuryr", "mtu": -Infinity'),
                     netconf.replace('"name": "kuryr"',
                                     '"name": "kuryr", "name": "other"')):
            status, err = d.shim("ADD", text, container_id=unique("c", 20),
                                 netns=ns)
            assert (status, err["code"]) == (1, 6), (text, err)
        assert d.state.cni_failures() == 0
        assert d.ipam.list() == before      # the eth1 address was released
        links = [link["ifname"] for link in ip_json("-n", name, "link")]
        assert sorted(links) == ["eth0", "lo"]
        assert {link["ifname"] for link in ip_json("link")} == host_links


def _hold_lock(locks_dir: str, cid: str, ready: Any, release: Any) -> None:
    from kuryr_supervisor.cni.locks import ContainerLocks
    with ContainerLocks(locks_dir).hold(cid, timeout=5):
        ready.set()
        release.wait(30)


def test_add_abandoned_by_a_timed_out_shim_is_rolled_back(
        tmp_path: Any, namespaces: Namespaces) -> None:
    """The shim gives up (its timeout) while the ADD waits; when the ADD
    finishes anyway it is undone, so the runtime's retry succeeds instead
    of meeting 102 ("already exists") until a DEL comes."""
    import multiprocessing
    import os
    import time

    name = namespaces.create()
    ns = f"/var/run/netns/{name}"
    cid = unique("c", 20)
    with running_daemon(str(tmp_path)) as d:
        ctx = multiprocessing.get_context("fork")
        ready, release = ctx.Event(), ctx.Event()
        holder = ctx.Process(target=_hold_lock, args=(
            os.path.join(d.tmp, "state", "locks"), cid, ready, release))
        holder.start()
        try:
            assert ready.wait(5)
            status, err = d.shim("ADD", d.netconf(extra={"timeout": 1}),
                                 container_id=cid, netns=ns)
            assert (status, err["code"]) == (1, 11), err
        finally:
            release.set()
            holder.join(5)
        # the ADD now runs to its end, finds its client gone, rolls back
        deadline = time.monotonic() + 10
        while d.server.inflight and time.monotonic() < deadline:
            time.sleep(0.05)
        assert d.ipam.list() == []
        assert ip_json("-n", name, "link", "show", "eth0") == []
        assert d.state.cni_failures() == 0
        status, res = d.shim("ADD", d.netconf(), container_id=cid, netns=ns)
        assert status == 0, res
