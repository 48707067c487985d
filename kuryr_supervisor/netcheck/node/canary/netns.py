"""The canary's network namespace: the daemon's own, held by a descriptor.

Made by a throwaway thread (``unshare(CLONE_NEWNET)`` moves only the
calling thread, as ``setns`` does), which opens its namespace and ends;
the descriptor keeps the namespace alive, named by a ``/proc`` path that
the binding opens as it opens a pod's. Nothing is mounted (no
``/run/netns`` entry: the DaemonSet's mount of it is read-only to the
host), so the namespace dies with the process that holds it, and its
veth with it: the next HealthManager plugs the canary again.

:meth:`OwnNetns.enter` moves the calling thread into it, for the threads
that probe and answer from inside (their sockets stay there).
"""
from __future__ import annotations

import ctypes
import os
import threading

from kuryr_supervisor.cni.netlink.base import CLONE_NEWNET, setns


def _unshare_net() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"unshare(CLONE_NEWNET): {os.strerror(code)}")


class OwnNetns:
    """See the module; :meth:`close` lets the namespace go."""

    def __init__(self) -> None:
        box: dict[str, object] = {}

        def make() -> None:
            try:
                _unshare_net()
                box["fd"] = os.open(f"/proc/self/task/{threading.get_native_id()}"
                                    "/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            except OSError as exc:
                box["error"] = exc
        thread = threading.Thread(target=make, name="canary-netns")
        thread.start()
        thread.join()
        if "error" in box:
            raise box["error"]  # type: ignore[misc]
        self.fd: int = box["fd"]  # type: ignore[assignment]

    @property
    def path(self) -> str:
        """A path naming the namespace while this process holds it."""
        return f"/proc/{os.getpid()}/fd/{self.fd}"

    def enter(self) -> None:
        """Move the calling thread into the namespace."""
        setns(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
