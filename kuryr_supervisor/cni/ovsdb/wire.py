"""JSON-RPC 1.0 over a stream socket, as ovsdb-server (RFC 7047) and the
OVS/OVN daemons' control sockets (``unixctl``) speak it: the standard
library only.

A :class:`Channel` owns one connected socket and one reader thread. Calls
(:meth:`Channel.call`) wait for their reply at most the seconds given;
notifications from the peer (``update2``) go to ``on_notify`` on the
reader thread, and the peer's ``echo`` requests (its inactivity probe) are
answered there at once.

Invariants:

* Messages are JSON objects back to back with no framing; a message larger
  than :data:`MAX_MESSAGE` bytes is the peer's fault: the channel closes.
* A call never waits longer than its ``timeout``: on expiry it raises
  :class:`NoAnswer` and its late reply, if one ever comes, is dropped.
  A closed channel fails every call waiting on it at once
  (:class:`ChannelClosed`).
* ``on_notify`` and ``on_close`` run on the reader thread; they must not
  call the channel back and wait (the reader is what would answer).
"""
from __future__ import annotations

import codecs
import itertools
import json
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

LOG = logging.getLogger(__name__)

#: Largest message accepted from a peer (an initial monitor reply of a big
#: node is well under it).
MAX_MESSAGE = 64 * 1024 * 1024
_RECV = 256 * 1024


class WireError(Exception):
    """The peer could not be reached, closed, or broke the protocol."""


class ChannelClosed(WireError):
    """The connection is gone (EOF, reset, a protocol error, closed)."""


class NoAnswer(WireError):
    """The peer did not answer within the call's timeout."""


class RpcError(Exception):
    """The peer answered with an error object."""

    def __init__(self, error: Any) -> None:
        super().__init__(error if isinstance(error, str) else
                         json.dumps(error, sort_keys=True))
        self.error = error


def connect(remote: str, timeout: float) -> socket.socket:
    """A connected socket for ``unix:<path>`` or ``tcp:<host>:<port>``."""
    kind, _, where = remote.partition(":")
    try:
        if kind == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address: Any = where
        elif kind == "tcp":
            host, _, port = where.rpartition(":")
            address = (host.strip("[]"), int(port))
            family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
        else:
            raise WireError(f"unsupported remote {remote!r}")
    except OSError as exc:
        raise WireError(f"{remote}: {exc}") from exc
    sock.settimeout(timeout)
    try:
        sock.connect(address)
    except OSError as exc:
        sock.close()
        raise WireError(f"cannot connect to {remote}: {exc}") from exc
    sock.settimeout(None)
    if kind == "tcp":
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class _Pending:
    __slots__ = ("done", "error", "result")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.error: Any = None


class Reply:
    """The answer to one request sent on a :class:`Channel`."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.pending = _Pending()
        self.ident = 0

    def result(self, timeout: float) -> Any:
        """The result, waited for at most ``timeout`` seconds (NoAnswer);
        RpcError for an error answer, ChannelClosed if the channel went."""
        pending = self.pending
        try:
            if not pending.done.wait(timeout):
                raise NoAnswer(f"{self.channel.name}: no answer within "
                               f"{timeout:g} s")
        finally:
            self.channel.forget(self.ident)
        if pending.error is not None:
            if isinstance(pending.error, ChannelClosed):
                raise pending.error
            raise RpcError(pending.error)
        return pending.result


class Channel:
    """One connection: calls with replies, notifications, echo answered."""

    def __init__(self, sock: socket.socket, name: str, *,
                 on_notify: Callable[[str, Any], None] = lambda m, p: None,
                 on_close: Callable[[str], None] = lambda why: None) -> None:
        self.name = name
        self._sock = sock
        self._on_notify = on_notify
        self._on_close = on_close
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._closed: str | None = None
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name=f"ovsdb-{name}")
        self._reader.start()

    @property
    def closed(self) -> str | None:
        """Why the channel closed; None while open."""
        return self._closed

    def call(self, method: str, params: list[Any], timeout: float) -> Any:
        """Send a request; its result (RpcError for an error answer)."""
        return self.send(method, params).result(timeout)

    def send(self, method: str, params: list[Any]) -> Reply:
        """Send a request now; its :class:`Reply` to wait for later."""
        reply = Reply(self)
        with self._lock:
            if self._closed is not None:
                raise ChannelClosed(f"{self.name}: {self._closed}")
            ident = next(self._ids)
            self._pending[ident] = reply.pending
        reply.ident = ident
        try:
            self._send({"method": method, "params": params, "id": ident})
        except BaseException:
            self.forget(ident)
            raise
        return reply

    def forget(self, ident: int) -> None:
        """Drop the waiter of call ``ident`` (answered, given up on, or
        never sent): a late answer then finds no one."""
        with self._lock:
            self._pending.pop(ident, None)

    def close(self, why: str = "closed") -> None:
        """Close the socket; every waiting call fails at once."""
        self._shut(why)

    def abandon(self) -> None:
        """In a child after a fork: close this process's copy of the
        socket only (no shutdown: the parent's connection goes on)."""
        self._closed = "abandoned after a fork"
        self._sock.close()

    # -- internals ---------------------------------------------------------------
    def _send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":")).encode()
        try:
            with self._send_lock:
                self._sock.sendall(data)
        except OSError as exc:
            self._shut(f"send failed: {exc}")
            raise ChannelClosed(f"{self.name}: send failed: {exc}") from exc

    def _shut(self, why: str) -> None:
        with self._lock:
            if self._closed is not None:
                return
            self._closed = why
            waiting = list(self._pending.values())
        for pending in waiting:
            pending.error = ChannelClosed(f"{self.name}: {why}")
            pending.done.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def _read(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")()
        parser = json.JSONDecoder()
        buf = ""
        why = "closed by peer"
        try:
            while self._closed is None:
                data = self._sock.recv(_RECV)
                if not data:
                    break
                buf += decoder.decode(data)
                if len(buf) > MAX_MESSAGE:
                    why = "message too large"
                    break
                buf = self._parse(parser, buf)
        except (OSError, ValueError) as exc:
            why = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - the channel ends, never silently
            LOG.exception("OVSDB channel %s: reader failed", self.name)
            why = f"{type(exc).__name__}: {exc}"
        was_open = self._closed is None
        self._shut(why)
        if was_open:
            self._on_close(why)

    def _parse(self, parser: json.JSONDecoder, buf: str) -> str:
        """Handle every whole message at the start of ``buf``; the rest."""
        at = 0
        while True:
            while at < len(buf) and buf[at] in " \t\r\n":
                at += 1
            if at >= len(buf) or not buf.rstrip().endswith("}"):
                return buf[at:]
            try:
                message, at = parser.raw_decode(buf, at)
            except json.JSONDecodeError:
                return buf[at:]          # not whole yet
            if not isinstance(message, dict):
                raise ValueError("a JSON-RPC message is not an object")
            self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method is None:                        # a reply
            ident = message.get("id")
            with self._lock:
                pending = self._pending.get(ident) if isinstance(
                    ident, int) else None
            if pending is not None:
                pending.result = message.get("result")
                pending.error = message.get("error")
                pending.done.set()
            return
        if method == "echo" and "id" in message:
            self._send({"result": message.get("params", []), "error": None,
                        "id": message["id"]})
            return
        if message.get("id") is None:             # a notification
            self._on_notify(str(method), message.get("params"))
            return
        self._send({"result": None, "error": f"unknown method {method}",
                    "id": message["id"]})
