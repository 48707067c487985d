"""Who holds a port or a socket path the daemon must listen on.

Why: a port taken by anything at all used to stop the daemon with "already
running", blaming a second kuryr-supervisor that may not exist (a local
user can bind the probe port first). What the kernel knows is said
instead: for TCP, the socket's uid and inode from ``/proc/net/tcp`` and
``tcp6`` (the reader's network namespace, the daemon's own), and the
processes holding that inode from a scan of ``/proc/<pid>/fd`` -- bounded
in entries and time, since a host can have millions of descriptors; for a
Unix socket, the listener's credentials (``SO_PEERCRED`` of a connection).

Inputs are injected (``proc`` root) so the parsing is tested against
fixture trees; nothing here raises: a description is best effort.
"""
from __future__ import annotations

import dataclasses
import os
import socket
import struct
import time
from collections.abc import Callable

#: Upper bounds of one scan of /proc/<pid>/fd (entries, seconds).
MAX_FDS = 200_000
MAX_SECONDS = 1.0
_TIME_WAIT = "06"
_SHOWN_PIDS = 3


@dataclasses.dataclass(frozen=True)
class Holder:
    """One socket on the port: its owner's uid and the processes found."""

    uid: int
    pids: tuple[int, ...]
    comm: str = ""
    complete: bool = True       # False: the scan stopped at a bound

    def __str__(self) -> str:
        if self.pids:
            label = "pid" if len(self.pids) == 1 else "pids"
            shown = ", ".join(str(p) for p in self.pids[:_SHOWN_PIDS])
            more = " and more" if len(self.pids) > _SHOWN_PIDS else ""
            comm = f" ({self.comm})" if self.comm else ""
            return f"{label} {shown}{more}{comm}, uid {self.uid}"
        why = "" if self.complete else "; the process scan stopped at its bound"
        return f"uid {self.uid} (no process found{why})"


def tcp_sockets(port: int, *, proc: str = "/proc") -> list[tuple[int, int]]:
    """(uid, inode) of every TCP socket bound to ``port`` (any address,
    IPv4 and IPv6), except TIME_WAIT leftovers (no owner)."""
    found = []
    for name in ("tcp", "tcp6"):
        try:
            with open(os.path.join(proc, "net", name)) as table:
                lines = table.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] == _TIME_WAIT:
                continue
            try:
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                uid, inode = int(fields[7]), int(fields[9])
            except (IndexError, ValueError):
                continue
            if local_port == port and inode:
                found.append((uid, inode))
    return found


def processes(inodes: set[int], *, proc: str = "/proc",
              max_fds: int = MAX_FDS, max_seconds: float = MAX_SECONDS,
              clock: Callable[[], float] = time.monotonic
              ) -> tuple[dict[int, list[int]], bool]:
    """inode -> pids holding it; and whether the scan was complete."""
    wanted = {f"socket:[{inode}]": inode for inode in inodes}
    found: dict[int, list[int]] = {inode: [] for inode in inodes}
    now = clock
    deadline = now() + max_seconds
    seen = 0
    try:
        pids = sorted(int(e) for e in os.listdir(proc) if e.isdigit())
    except OSError:
        return found, False
    for pid in pids:
        fd_dir = os.path.join(proc, str(pid), "fd")
        try:
            entries = os.listdir(fd_dir)
        except OSError:
            continue                    # gone, or not ours to read
        for entry in entries:
            seen += 1
            if seen > max_fds or now() > deadline:
                return found, False
            try:
                target = os.readlink(os.path.join(fd_dir, entry))
            except OSError:
                continue
            inode = wanted.get(target)
            if inode is not None and pid not in found[inode]:
                found[inode].append(pid)
    return found, True


def command_name(pid: int, *, proc: str = "/proc") -> str:
    try:
        with open(os.path.join(proc, str(pid), "comm")) as f:
            return f.read().strip()
    except OSError:
        return ""


def tcp_holders(port: int, *, proc: str = "/proc", max_fds: int = MAX_FDS,
                max_seconds: float = MAX_SECONDS) -> list[Holder]:
    """Who holds TCP ``port``, as far as the kernel says."""
    sockets = tcp_sockets(port, proc=proc)
    if not sockets:
        return []
    by_inode, complete = processes({inode for _, inode in sockets},
                                   proc=proc, max_fds=max_fds,
                                   max_seconds=max_seconds)
    holders = []
    for uid, inode in sockets:
        pids = tuple(by_inode.get(inode, ()))
        comm = command_name(pids[0], proc=proc) if pids else ""
        holder = Holder(uid, pids, comm, complete)
        if holder not in holders:
            holders.append(holder)
    return holders


def describe_tcp(port: int, *, proc: str = "/proc") -> str:
    """``held by pid N (comm), uid U``, or what little the kernel says."""
    holders = tcp_holders(port, proc=proc)
    if not holders:
        return "held by a socket this process cannot see"
    return "held by " + "; ".join(str(h) for h in holders)


def describe_unix(path: str, *, proc: str = "/proc") -> str:
    """The listener on the Unix socket ``path``: its pid and uid, from the
    credentials the kernel recorded when it called listen()."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(1.0)
            probe.connect(path)
            raw = probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                   struct.calcsize("3i"))
    except OSError:
        return "held by a listener that could not be identified"
    pid, uid, _ = struct.unpack("3i", raw)
    comm = command_name(pid, proc=proc)
    return f"held by {Holder(uid, (pid,), comm)}"
