"""The OVSDB adapter's parts without a database: JSON-RPC framing against a
peer on a socketpair (split and joined messages, the peer's echo, a call
that gets no answer, a peer that goes away), ``update2`` diffs applied to
the replica, its errors as CNI errors, and the readiness check ``ovsdb``
over a stand-in. The real ovsdb-server: ``tests/functional/
test_ovsdb_adapter.py``."""
from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import pytest
from oslo_config import cfg

from kuryr_supervisor import errors
from kuryr_supervisor.cni import ovsdb
from kuryr_supervisor.cni.binding.ovsports import is_ours_by_name, ovsdb_error
from kuryr_supervisor.cni.ovsdb import wire
from kuryr_supervisor.cni.ovsdb.rows import Kind, Replica, Table, apply_diff
from kuryr_supervisor.conf import binding as binding_conf
from kuryr_supervisor.health.checks.base import Kind as CheckKind
from kuryr_supervisor.health.checks.base import Sort
from kuryr_supervisor.health.checks.ovsdb import OvsdbCheck


class Peer:
    """The far end of a socketpair: reads what the channel sends."""

    def __init__(self) -> None:
        self.mine, theirs = socket.socketpair()
        self.notes: list[tuple[str, Any]] = []
        self.closed = threading.Event()
        self.channel = wire.Channel(
            theirs, "test", on_notify=lambda m, p: self.notes.append((m, p)),
            on_close=lambda why: self.closed.set())
        self._buf = b""

    def receive(self) -> dict[str, Any]:
        decoder = json.JSONDecoder()
        while True:
            try:
                msg, end = decoder.raw_decode(self._buf.decode())
                self._buf = self._buf[end:]
                return dict(msg)
            except ValueError:
                self._buf += self.mine.recv(65536)


def test_split_and_joined_messages_and_the_echo() -> None:
    peer = Peer()
    try:
        got: list[Any] = []
        caller = threading.Thread(target=lambda: got.append(
            peer.channel.call("transact", ["db"], 5)))
        caller.start()
        request = peer.receive()
        assert request["method"] == "transact" and request["params"] == ["db"]
        reply = json.dumps({"id": request["id"], "result": [{"é": 1}],
                            "error": None}).encode()
        note = json.dumps({"method": "update2", "id": None,
                           "params": ["m", {"T": {}}]}).encode()
        echo = json.dumps({"method": "echo", "id": "e1", "params": []}).encode()
        data = note + reply + b" \n" + echo
        for i in range(0, len(data), 7):        # split anywhere, UTF-8 too
            peer.mine.sendall(data[i:i + 7])
            time.sleep(0.001)
        caller.join(5)
        assert got == [[{"é": 1}]]
        assert peer.notes == [("update2", ["m", {"T": {}}])]
        assert peer.receive() == {"result": [], "error": None, "id": "e1"}
    finally:
        peer.channel.close()
        peer.mine.close()


def test_no_answer_is_bounded_and_a_gone_peer_fails_waiters() -> None:
    peer = Peer()
    try:
        started = time.monotonic()
        with pytest.raises(wire.NoAnswer, match="no answer within 0.2 s"):
            peer.channel.call("transact", [], 0.2)
        assert time.monotonic() - started < 1
        failed: list[BaseException] = []

        def waiting() -> None:
            try:
                peer.channel.call("transact", [], 10)
            except wire.ChannelClosed as exc:
                failed.append(exc)
        caller = threading.Thread(target=waiting)
        caller.start()
        peer.receive()
        peer.receive()
        peer.mine.close()
        caller.join(5)
        assert failed and peer.closed.wait(5)
        with pytest.raises(wire.ChannelClosed):
            peer.channel.call("transact", [], 1)
    finally:
        peer.channel.close()


def test_a_peer_error_is_an_rpc_error() -> None:
    peer = Peer()
    try:
        got: list[BaseException] = []

        def call() -> None:
            try:
                peer.channel.call("monitor_cond", [], 5)
            except wire.RpcError as exc:
                got.append(exc)
        caller = threading.Thread(target=call)
        caller.start()
        request = peer.receive()
        peer.mine.sendall(json.dumps({"id": request["id"], "result": None,
                                      "error": "unknown database"}).encode())
        caller.join(5)
        assert [str(e) for e in got] == ["unknown database"]
    finally:
        peer.channel.close()
        peer.mine.close()


@pytest.mark.parametrize("kind,old,diff,new", [
    (Kind.MAP, {"a": "1", "b": "2"},
     ["map", [["a", "1"], ["b", "3"], ["c", "4"]]], {"b": "3", "c": "4"}),
    (Kind.SET, ["x", "y"], ["set", [["uuid", "y"], ["uuid", "z"]]],
     ["x", "z"]),
    (Kind.SET, [], ["uuid", "u"], ["u"]),
    (Kind.OPTIONAL, None, 5, 5),
    (Kind.OPTIONAL, 5, 6, 6),
    (Kind.OPTIONAL, 5, ["set", []], None),
    (Kind.ATOM, "system", "netdev", "netdev"),
])
def test_update2_diffs(kind: Kind, old: Any, diff: Any, new: Any) -> None:
    assert apply_diff(kind, old, diff) == new


def test_replica_follows_inserts_modifies_and_deletes() -> None:
    table = Table("Interface", {"name": Kind.ATOM, "external_ids": Kind.MAP,
                                "ofport": Kind.OPTIONAL})
    replica = Replica((table,))
    replica.reset({"Interface": {"u1": {"initial": {
        "name": "a", "external_ids": ["map", [["k", "v"]]]}}}})
    assert list(replica.find("Interface", name="a"))[0]["ofport"] is None
    replica.apply({"Interface": {
        "u1": {"modify": {"external_ids": ["map", [["ovn-installed",
                                                    "true"]]],
                          "ofport": 7}},
        "u2": {"insert": {"name": "b"}}, "Other": {}}})
    [a] = replica.find("Interface", name="a")
    assert a["external_ids"] == {"k": "v", "ovn-installed": "true"}
    assert a["ofport"] == 7 and a["_uuid"] == "u1"
    replica.apply({"Interface": {"u1": {"delete": None}}})
    assert [r["name"] for r in replica.find("Interface")] == ["b"]


@pytest.mark.parametrize("exc,kind,code,counted", [
    (ovsdb.OvsdbUnavailable("OVSDB unix:/x: no answer within 5 s"),
     errors.OvsdbUnavailable, 11, False),
    (ovsdb.OvsdbError("no bridge named br-int"),
     errors.OvsdbUnavailable, 11, False),
    (ovsdb.OvsdbError("OVSDB unix:/x refused: constraint violation"),
     errors.PlumbingError, 100, True),
])
def test_failures_become_cni_errors(exc: ovsdb.OvsdbError, kind: type,
                                    code: int, counted: bool) -> None:
    err = ovsdb_error("DEL", exc, "br-int")
    assert type(err) is kind and err.wire.code == code
    assert err.wire.counts_as_failure is counted


def test_only_our_names_are_ours() -> None:
    assert is_ours_by_name("ksv0123456789ab")
    for name in ("ksv0123456789a", "ksv0123456789aB", "tap0123456789ab",
                 "ksv0123456789abc"):
        assert not is_ours_by_name(name)


def conf(connection: str = "unix:/x/db.sock") -> cfg.ConfigOpts:
    c = cfg.ConfigOpts()
    binding_conf.register_opts(c)
    c([], default_config_files=[])
    c.set_override("ovsdb_connection", connection, "binding")
    return c


class StandIn:
    """What the check asks of :class:`ovsdb.Ovsdb`."""

    connection = "unix:/x/db.sock"

    def __init__(self) -> None:
        self.answer: Any = {"name": "br-int", "datapath_type": "netdev"}

    def bridge(self, name: str) -> dict[str, Any] | None:
        if isinstance(self.answer, Exception):
            raise self.answer
        return dict(self.answer) if self.answer else None


def test_readiness_ovsdb_over_one_held_connection() -> None:
    made = [StandIn()]
    check = OvsdbCheck(conf(), made[0])  # type: ignore[arg-type]
    assert (check.kind, check.sort, check.name) == (CheckKind.READINESS,
                                                    Sort.IO, "ovsdb")
    assert check.timeout() == 5.0
    result = check.run(0.0)
    assert result.ok and "br-int present (datapath netdev" in result.message
    made[0].answer = None
    result = check.run(0.0)
    assert not result.ok
    assert "integration bridge br-int is not in OVSDB" in result.message
    made[0].answer = ovsdb.OvsdbUnavailable(
        "OVSDB unix:/x/db.sock: no answer within 5 s")
    result = check.run(0.0)
    assert not result.ok
    assert result.message == "OVSDB unix:/x/db.sock: no answer within 5 s"
    assert check.db is made[0]                 # the one connection, kept
