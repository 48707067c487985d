"""The master's channel to the running Server about the CNI socket file.

:class:`Handoff` carries a re-created listening socket (``SCM_RIGHTS``) and
the fault the master finds at the socket's path; see its docstring for why
a message and not a restart.
"""
from __future__ import annotations

import logging
import socket
from typing import NamedTuple

from kuryr_supervisor.state import Fault

LOG = logging.getLogger(__name__)


class Notice(NamedTuple):
    """One message of the master to the Server about the CNI socket."""

    fault: Fault                  # what is wrong with the path (NONE: fine)
    sock: socket.socket | None    # the re-created listening socket

    @property
    def lost(self) -> bool:
        """The file at the path is not ours (yet)."""
        return bool(self.fault)


class Handoff:
    """The master's channel to the Server for a re-created CNI socket.

    Why a message with the descriptor (``SCM_RIGHTS``) and not a graceful
    restart of the Server: the master binds the new socket and ``dup2``-s
    it onto its own listening descriptor, which later workers inherit, but
    the running Server holds its own copy of the old one. Passing the new
    socket lets that Server keep its in-flight requests, its warm caches
    and its readiness, accepts what is still queued on the old socket
    before swapping, and costs no restart (which would count against the
    restart budget and be a window with no accept loop). The channel is a
    ``SOCK_SEQPACKET`` pair created before the fork, so a message is never
    split; a message sent while no Server runs waits for the next one.
    The "lost" message (with the fault found: deleted, blocked, untrusted)
    lets the Server, the only writer of the fault bits, raise it while the
    master cannot bind the path again; "found" clears it when the master's
    own socket file is back at the path (moved away and back).
    """

    _TAGS = {Fault.SOCKET: b"L", Fault.SOCKET_BLOCKED: b"B",
             Fault.SOCKET_UNTRUSTED: b"U"}
    _FOUND, _NEW = b"F", b"N"

    def __init__(self) -> None:
        self._master, self._server = socket.socketpair(
            socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._master.setblocking(False)
        self._server.setblocking(False)

    def _send(self, tag: bytes, fds: list[int]) -> bool:
        try:
            socket.send_fds(self._master, [tag], fds)
        except OSError as exc:   # full: the Server is gone for a long time
            LOG.warning("cannot tell the Server about the CNI socket: %s", exc)
            return False
        return True

    def lost(self, fault: Fault = Fault.SOCKET) -> bool:
        """Master: the socket file is not ours and could not be re-created
        (``fault`` says why: deleted or replaced, blocked, untrusted)."""
        return self._send(self._TAGS[fault], [])

    def found(self) -> bool:
        """Master: the file at the path is our socket again."""
        return self._send(self._FOUND, [])

    def replaced(self, sock: socket.socket) -> bool:
        """Master: ``sock`` is the CNI socket now."""
        return self._send(self._NEW, [sock.fileno()])

    def receive(self) -> list[Notice]:
        """Server: every pending notice, oldest first (never blocks)."""
        faults = {tag: fault for fault, tag in self._TAGS.items()}
        notices: list[Notice] = []
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self._server, 16, 1)
            except (BlockingIOError, InterruptedError):
                return notices
            if not data:
                return notices
            sock = socket.socket(fileno=fds[0]) if fds else None
            fault = faults.get(data, Fault.NONE) if sock is None \
                else Fault.NONE
            notices.append(Notice(fault=fault, sock=sock))

    def close(self) -> None:
        self._master.close()
        self._server.close()
