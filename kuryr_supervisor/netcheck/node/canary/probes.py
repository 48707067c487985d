"""One round of the canary's probes, and its answer to its peers' probes:
plain sockets, run by threads inside the canary's namespace.

A round (:func:`probe_round`) probes every target at once in one
``select`` loop, each bounded by ``timeout`` seconds:

* ICMP echo (a raw socket: ``CAP_NET_RAW``; without it ICMP is not tried)
  to the gateway and to each peer, sent again after half the timeout if
  unanswered, so one lost packet is not a failure;
* a small TCP exchange with each peer's canary, as cilium-health's HTTP
  probe: connect to ``port``, send a nonce, read it back behind
  :data:`BANNER`.

A peer is reached when either answered (a security group may let only
one through); its latency is the TCP exchange's when it answered, else
the echo's. The canary Service's VIP is probed by the TCP exchange alone,
on the Service's port, three at once: the load balancer hands each to one
of the canaries, and the VIP is reached when one answers.

:class:`Responder` is the other side: the canary's listener on ``port``,
one thread, at most :data:`MAX_CLIENTS` connections at once and each
closed after :data:`CLIENT_SECONDS`, so whatever the pod network sends it
costs a bounded thread and a few descriptors.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Sequence

LOG = logging.getLogger(__name__)

BANNER = b"kuryr-canary "
NONCE_BYTES = 16
MAX_CLIENTS = 32
CLIENT_SECONDS = 1.0
#: Connections accepted a round at most (the listen queue is MAX_CLIENTS).
ACCEPTS_PER_ROUND = 2 * MAX_CLIENTS
_ECHO, _ECHO_REPLY = 8, 0


@dataclasses.dataclass(frozen=True)
class Target:
    address: ipaddress.IPv4Address
    tcp: bool                      # a peer's canary (the gateway: ICMP only)
    #: The TCP port (0: the round's); ICMP too, unless False (a Service's
    #: VIP: only its load balancer's path, the TCP exchange, counts).
    port: int = 0
    icmp: bool = True
    #: TCP exchanges at once (reached when one answers): a load balancer
    #: hashes each to a backend, so one dead backend (the canary of a node
    #: that is cut off, until it is out of the endpoints) does not fail
    #: the probe.
    tries: int = 1


@dataclasses.dataclass(frozen=True)
class Outcome:
    icmp: bool | None              # None: not tried
    tcp: bool | None
    latency_ms: float | None = None

    @property
    def reached(self) -> bool:
        return bool(self.icmp or self.tcp)


def icmp_socket() -> socket.socket | None:
    """A raw ICMP socket in the calling thread's namespace; None without
    the privilege (``CAP_NET_RAW``)."""
    try:
        return socket.socket(socket.AF_INET, socket.SOCK_RAW,
                             socket.IPPROTO_ICMP)
    except PermissionError:
        return None


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def echo(ident: int, seq: int) -> bytes:
    """An ICMP echo request."""
    payload = b"kuryr-canary"
    head = struct.pack("!BBHHH", _ECHO, 0, 0, ident, seq)
    return struct.pack("!BBHHH", _ECHO, 0, _checksum(head + payload), ident,
                       seq) + payload


def parse_reply(packet: bytes) -> tuple[str, int, int] | None:
    """(source, id, seq) of an echo reply as a raw socket reads it (the IP
    header first); None for anything else."""
    if len(packet) < 20:
        return None
    ihl = (packet[0] & 0x0F) * 4
    if len(packet) < ihl + 8 or packet[ihl] != _ECHO_REPLY:
        return None
    _, _, _, ident, seq = struct.unpack_from("!BBHHH", packet, ihl)
    return socket.inet_ntoa(packet[12:16]), ident, seq


class _Tcp:
    """One TCP exchange in flight."""

    def __init__(self, address: str, port: int) -> None:
        self.nonce = os.urandom(NONCE_BYTES).hex().encode()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setblocking(False)
        self.sent = False
        self.got = b""
        self.sock.connect_ex((address, port))

    def writable(self) -> bool:
        """Connected: send the nonce. False when the connect failed."""
        if self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            return False
        self.sock.send(self.nonce + b"\n")
        self.sent = True
        return True

    def readable(self) -> bool | None:
        """True once the answer is whole and right, False when wrong or
        closed early, None while it is still coming."""
        data = self.sock.recv(256)
        if not data:
            return False
        self.got += data
        want = BANNER + self.nonce
        if len(self.got) >= len(want):
            return self.got.startswith(want)
        return None


def probe_round(targets: Sequence[Target], *, port: int, timeout: float,
                icmp: socket.socket | None, ident: int = 0
                ) -> dict[ipaddress.IPv4Address, Outcome]:
    """Probe every target at once (see the module); their outcomes."""
    ident = ident or (os.getpid() & 0xFFFF)
    start = time.monotonic()
    end = start + timeout
    addresses = {str(t.address): t for t in targets}
    icmp_ok: dict[str, float] = {}
    tcp_ok: dict[str, float] = {}
    tcp_failed: set[str] = set()
    seqs = {addr: i + 1 for i, addr in enumerate(addresses)
            if addresses[addr].icmp}
    resent = False

    def send_echoes() -> None:
        if icmp is None:
            return
        for addr, seq in seqs.items():
            if addr not in icmp_ok:
                try:
                    icmp.sendto(echo(ident, seq), (addr, 0))
                except OSError:
                    pass            # unreachable now: unanswered
    pending: dict[socket.socket, tuple[str, _Tcp]] = {}
    try:
        for addr, target in addresses.items():
            for _ in range(target.tries if target.tcp else 0):
                exchange = _Tcp(addr, target.port or port)
                pending[exchange.sock] = (addr, exchange)
        send_echoes()
        while True:
            now = time.monotonic()
            if now >= end:
                break
            if not resent and now >= start + timeout / 2:
                resent = True
                send_echoes()
            icmp_done = icmp is None or len(icmp_ok) == len(seqs)
            if icmp_done and not pending:
                break
            reads = [s for s, (_, x) in pending.items() if x.sent]
            writes = [s for s, (_, x) in pending.items() if not x.sent]
            if icmp is not None and not icmp_done:
                reads.append(icmp)
            wait = min(end, start + timeout / 2) if not resent else end
            r, w, _ = select.select(reads, writes, [],
                                    max(0.0, wait - now))
            at = time.monotonic()
            for sock in r:
                if sock is icmp:
                    found = parse_reply(icmp.recv(2048))
                    if found and found[1] == ident and \
                            seqs.get(found[0]) == found[2]:
                        icmp_ok.setdefault(found[0], at - start)
                    continue
                addr, exchange = pending[sock]
                try:
                    answer = exchange.readable()
                except OSError:
                    answer = False
                if answer is not None:
                    (tcp_ok.__setitem__(addr, at - start) if answer
                     else tcp_failed.add(addr))
                    del pending[sock]
                    sock.close()
            for sock in w:
                addr, exchange = pending[sock]
                try:
                    ok = exchange.writable()
                except OSError:
                    ok = False
                if not ok:
                    tcp_failed.add(addr)
                    del pending[sock]
                    sock.close()
    finally:
        for sock in pending:
            sock.close()
    out = {}
    for addr, target in addresses.items():
        latency = tcp_ok.get(addr, icmp_ok.get(addr))
        out[target.address] = Outcome(
            None if icmp is None or not target.icmp else addr in icmp_ok,
            (addr in tcp_ok) if target.tcp else None,
            None if latency is None else latency * 1000)
    return out


class Responder:
    """The canary's TCP listener (see the module), on a thread that
    entered the canary's namespace first (``enter``)."""

    def __init__(self, port: int, enter: object = None) -> None:
        self.port = port
        self._enter = enter
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.error: OSError | None = None
        self.answered = 0
        #: CPU seconds its thread has spent.
        self.cpu_seconds = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="canary-responder")

    def start(self, timeout: float = 5.0) -> Responder:
        self._thread.start()
        self._ready.wait(timeout)
        if self.error is not None:
            raise self.error
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        try:
            if callable(self._enter):
                self._enter()
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("0.0.0.0", self.port))
            server.listen(MAX_CLIENTS)
            server.setblocking(False)
        except OSError as exc:
            self.error = exc
            self._ready.set()
            return
        self._ready.set()
        clients: dict[socket.socket, tuple[float, bytes]] = {}
        try:
            while not self._stop.is_set():
                self._serve_once(server, clients)
                self.cpu_seconds = time.thread_time()
        finally:
            for sock in clients:
                sock.close()
            server.close()

    def _serve_once(self, server: socket.socket,
                    clients: dict[socket.socket, tuple[float, bytes]]) -> None:
        r, _, _ = select.select([server, *clients], [], [], 0.2)
        now = time.monotonic()
        for sock in r:
            if sock is server:
                self._accept(server, clients, now)
                continue
            deadline, got = clients[sock]
            try:
                data = sock.recv(NONCE_BYTES * 2 + 1)
            except OSError:
                data = b""
            got += data
            if data and b"\n" not in got and len(got) <= NONCE_BYTES * 2:
                clients[sock] = (deadline, got)
                continue
            if data:
                try:
                    sock.send(BANNER + got.split(b"\n", 1)[0][:NONCE_BYTES * 2])
                    self.answered += 1
                except OSError:
                    pass
            del clients[sock]
            sock.close()
        for sock, (deadline, _) in list(clients.items()):
            if now >= deadline:
                del clients[sock]
                sock.close()

    @staticmethod
    def _accept(server: socket.socket,
                clients: dict[socket.socket, tuple[float, bytes]],
                now: float) -> None:
        """Every connection waiting (a bounded number a round): a flood
        never fills the listen queue ahead of a peer's probe; one past
        :data:`MAX_CLIENTS` is closed at once."""
        for _ in range(ACCEPTS_PER_ROUND):
            try:
                conn, _ = server.accept()
            except OSError:
                return                    # none left waiting (EAGAIN)
            if len(clients) >= MAX_CLIENTS:
                conn.close()
                continue
            conn.setblocking(False)
            clients[conn] = (now + CLIENT_SECONDS, b"")
