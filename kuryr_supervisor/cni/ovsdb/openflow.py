"""How many OpenFlow flows a bridge holds for given ports: OpenFlow 1.3
over the bridge's management socket (``<rundir>/<bridge>.mgmt``), the
standard library alone.

Why OpenFlow: ovn-controller marks an Interface ``ovn-installed`` once,
and neither the mark nor its own counters move when the bridge's flows
go (``ovs-ofctl del-flows br-int``, an ovs-vswitchd that lost them):
only the switch knows what it holds. One aggregate-stats request per port
(table 0, ``in_port`` = the port: the flows that classify what a pod
sends) answers "are this pod's flows there" without dumping the table.

A :func:`flow_counts` call is one connection: HELLO, the requests sent
at once, their replies read, closed; every step bounded by ``timeout``
seconds in all (:class:`OpenFlowError` when the switch is unreachable,
silent or refuses).
"""
from __future__ import annotations

import socket
import struct
import time
from collections.abc import Sequence

VERSION = 0x04                       # OpenFlow 1.3
OFPT_HELLO, OFPT_ERROR, OFPT_ECHO_REQUEST, OFPT_ECHO_REPLY = 0, 1, 2, 3
OFPT_MULTIPART_REQUEST, OFPT_MULTIPART_REPLY = 18, 19
OFPMP_AGGREGATE = 2
OFPP_ANY = OFPG_ANY = 0xFFFFFFFF
#: OXM ``in_port`` (class OPENFLOW_BASIC, field 0, 4 bytes).
OXM_IN_PORT = 0x80000004
_HEADER = struct.Struct("!BBHI")
#: At most this many ports asked in one call.
MAX_PORTS = 1024


class OpenFlowError(Exception):
    """The switch could not be asked (unreachable, silent, refused)."""


def hello(xid: int = 1) -> bytes:
    return _HEADER.pack(VERSION, OFPT_HELLO, _HEADER.size, xid)


def aggregate_request(xid: int, table: int, in_port: int) -> bytes:
    """An aggregate-stats request for the flows of ``table`` that match
    ``in_port`` (any cookie, output and group)."""
    match = struct.pack("!HHII", 1, 12, OXM_IN_PORT, in_port) + b"\0" * 4
    body = struct.pack("!HH4xB3xII4xQQ", OFPMP_AGGREGATE, 0, table,
                       OFPP_ANY, OFPG_ANY, 0, 0) + match
    return _HEADER.pack(VERSION, OFPT_MULTIPART_REQUEST,
                        _HEADER.size + len(body), xid) + body


def parse_aggregate(body: bytes) -> int:
    """The flow count of an aggregate-stats reply's body."""
    kind, _flags = struct.unpack_from("!HH", body)
    if kind != OFPMP_AGGREGATE or len(body) < 32:
        raise OpenFlowError(f"unexpected multipart reply {kind}")
    _packets, _bytes, flows = struct.unpack_from("!QQI", body, 8)
    return int(flows)


class _Reader:
    """Whole OpenFlow messages from ``sock`` until ``deadline``."""

    def __init__(self, sock: socket.socket, deadline: float,
                 where: str) -> None:
        self.sock, self.deadline, self.where = sock, deadline, where
        self.buf = b""

    def message(self) -> tuple[int, int, int, bytes]:
        """(version, type, xid, body) of the next message."""
        while True:
            if len(self.buf) >= _HEADER.size:
                version, kind, length, xid = _HEADER.unpack_from(self.buf)
                if length < _HEADER.size or length > 1 << 16:
                    raise OpenFlowError(f"{self.where}: bad message length "
                                        f"{length}")
                if len(self.buf) >= length:
                    body = self.buf[_HEADER.size:length]
                    self.buf = self.buf[length:]
                    return version, kind, xid, body
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise OpenFlowError(f"{self.where}: no answer in time")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError as exc:
                raise OpenFlowError(f"{self.where}: no answer in time") \
                    from exc
            if not data:
                raise OpenFlowError(f"{self.where}: closed by the switch")
            self.buf += data


def flow_counts(path: str, ports: Sequence[int], *, table: int = 0,
                timeout: float = 2.0) -> dict[int, int]:
    """port -> the flows of ``table`` matching ``in_port=port``, asked of
    the switch whose management socket is ``path``."""
    ports = list(dict.fromkeys(ports))[:MAX_PORTS]
    deadline = time.monotonic() + timeout
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
            sock.sendall(hello() + b"".join(
                aggregate_request(2 + i, table, port)
                for i, port in enumerate(ports)))
        except OSError as exc:
            raise OpenFlowError(f"{path}: {exc}") from exc
        reader = _Reader(sock, deadline, path)
        counts: dict[int, int] = {}
        by_xid = {2 + i: port for i, port in enumerate(ports)}
        while len(counts) < len(ports):
            try:
                version, kind, xid, body = reader.message()
            except OSError as exc:
                raise OpenFlowError(f"{path}: {exc}") from exc
            if kind == OFPT_HELLO:
                if version < VERSION:
                    raise OpenFlowError(f"{path}: the switch speaks "
                                        f"OpenFlow version {version} only")
            elif kind == OFPT_ECHO_REQUEST:
                sock.sendall(_HEADER.pack(VERSION, OFPT_ECHO_REPLY,
                                          _HEADER.size + len(body), xid)
                             + body)
            elif kind == OFPT_ERROR:
                code = struct.unpack_from("!HH", body) if len(body) >= 4 \
                    else (0, 0)
                raise OpenFlowError(f"{path}: the switch refused "
                                    f"(error type {code[0]} code {code[1]})")
            elif kind == OFPT_MULTIPART_REPLY and xid in by_xid:
                counts[by_xid[xid]] = parse_aggregate(body)
        return counts
    finally:
        sock.close()
