"""A hostile local user's HTTP clients, run as their own process.

``python3 -m drills.slowclients MODE PORT COUNT SECONDS`` raises its own
RLIMIT_NOFILE, drops to uid/gid 65534 (nobody), then keeps COUNT
connections open to 127.0.0.1:PORT for SECONDS:

- ``slowloris``: each connection sends a request line and then one header
  byte per connection every 0.5 s, never finishing its headers;
- ``keepalive``: each connection sends one complete request, reads the
  answer and then stays idle.

Whatever the server closes is reconnected, at most ``RECONNECT_PER_TICK``
per 0.1 s per process (500 a second; 3,000 a second from the six processes
of the full drill). A client connecting as fast as the CPU allows is a CPU
exhaustion attack on the whole node, which the daemon's cgroup CPU share,
not its probe server, has to absorb. At the end it prints one JSON line of counters.
"""
from __future__ import annotations

import errno
import json
import os
import resource
import selectors
import socket
import sys
import time

NOBODY = 65534
TICK = 0.1
TRICKLE_EVERY = 0.5
RECONNECT_PER_TICK = 50
_REQUEST = b"GET /alive HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def drop_privileges(files: int) -> None:
    """Enough descriptors for COUNT sockets, then become nobody."""
    want = files + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
    if os.getuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)


class Clients:
    def __init__(self, mode: str, port: int, count: int) -> None:
        self.mode = mode
        self.port = port
        self.count = count
        self.sel = selectors.DefaultSelector()
        self.open: dict[int, socket.socket] = {}
        self.stats = {"connects": 0, "closed by server": 0, "connect errors": 0,
                      "answers": 0, "uid": os.getuid()}

    def connect(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        err = sock.connect_ex(("127.0.0.1", self.port))
        if err not in (0, errno.EINPROGRESS):
            sock.close()
            self.stats["connect errors"] += 1
            return
        self.stats["connects"] += 1
        self.open[sock.fileno()] = sock
        self.sel.register(sock, selectors.EVENT_READ)
        first = _REQUEST if self.mode == "keepalive" else b"GET / HTTP/1.1\r\n"
        try:
            sock.send(first)
        except OSError:
            pass                      # still connecting: sent on the trickle

    def close(self, sock: socket.socket) -> None:
        self.sel.unregister(sock)
        del self.open[sock.fileno()]
        sock.close()

    def run(self, seconds: float) -> dict[str, int]:
        end = time.monotonic() + seconds
        next_trickle = next_tick = 0.0
        while time.monotonic() < end:
            if time.monotonic() >= next_tick:
                next_tick = time.monotonic() + TICK
                for _ in range(min(RECONNECT_PER_TICK,
                                   self.count - len(self.open))):
                    self.connect()
            for key, _ in self.sel.select(timeout=TICK):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if data:
                    self.stats["answers"] += data.count(b"HTTP/1.")
                else:
                    self.stats["closed by server"] += 1
                    self.close(sock)
            if self.mode == "slowloris" and time.monotonic() >= next_trickle:
                next_trickle = time.monotonic() + TRICKLE_EVERY
                for sock in list(self.open.values()):
                    try:
                        sock.send(b"X")
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        self.stats["closed by server"] += 1
                        self.close(sock)
        self.stats["open at end"] = len(self.open)
        for sock in list(self.open.values()):
            self.close(sock)
        return self.stats


def main(argv: list[str]) -> int:
    mode, port, count, seconds = argv[0], int(argv[1]), int(argv[2]), float(argv[3])
    drop_privileges(count)
    print(json.dumps(Clients(mode, port, count).run(seconds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
