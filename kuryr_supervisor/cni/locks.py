"""Per-container serialisation across threads and processes.

Role: one ADD, DEL, CHECK or GC step at a time per container id, whichever
process asks (the Server's request threads, the Watcher's cleanup), while
different containers proceed in parallel.

Why ``flock(2)`` on ``<dir>/<container_id>.lock``: a flock belongs to an open
file description, so two ``open()`` calls conflict even inside one process
(threads are covered as well as processes), and the kernel drops the lock
when its holder dies, even by SIGKILL, so no crash can leave a container
locked for good.

Invariants:
- the container id has been validated by the protocol layer (a safe file
  name) before it reaches this module;
- a lock file is only unlinked by a holder of its lock, and a waiter that
  wins the lock on a file that was meanwhile unlinked starts over, so two
  holders can never hold "the same" lock on different inodes.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import time
from collections.abc import Callable, Iterator

from kuryr_supervisor import errors

LOG = logging.getLogger(__name__)

_POLL_MIN = 0.002
_POLL_MAX = 0.05


class Held:
    """A held lock; set ``remove`` to unlink its file on release.

    ``created`` says whether this acquisition created the lock file, so a
    failed ADD can leave the directory exactly as it found it.
    """

    def __init__(self, remove: bool, created: bool) -> None:
        self.remove = remove
        self.created = created


class ContainerLocks:
    """Named, cross-process locks, one per container id."""

    def __init__(self, directory: str, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.directory = directory
        self._clock = clock
        self._sleep = sleep
        os.makedirs(directory, mode=0o700, exist_ok=True)

    def path(self, container_id: str) -> str:
        return os.path.join(self.directory, f"{container_id}.lock")

    @contextlib.contextmanager
    def hold(self, container_id: str, *, timeout: float,
             remove: bool = False) -> Iterator[Held]:
        """Hold the container's lock; raise :class:`errors.Timeout` when it
        cannot be had within ``timeout`` seconds.

        ``remove=True`` (DEL, GC) unlinks the lock file before releasing it,
        so the directory does not grow with every pod the node ever ran; a
        failed ADD sets ``held.remove`` so it leaves no file behind either.
        """
        fd, created = self._acquire(container_id, timeout)
        held = Held(remove, created)
        try:
            yield held
        finally:
            if held.remove:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path(container_id))
            os.close(fd)           # closing the last descriptor unlocks

    def _acquire(self, container_id: str, timeout: float) -> tuple[int, bool]:
        path = self.path(container_id)
        deadline = self._clock() + timeout
        delay = _POLL_MIN
        while True:
            try:
                fd, created = self._open(path)
            except FileNotFoundError:
                continue           # unlinked between our two opens
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise errors.InternalError(
                        f"cannot lock {path}: {exc.strerror}") from exc
                if self._clock() >= deadline:
                    raise errors.Timeout(
                        f"container {container_id} is busy with another "
                        f"operation (waited {timeout:.1f} s)") from exc
                self._sleep(delay)
                delay = min(delay * 2, _POLL_MAX)
                continue
            if self._same_file(fd, path):
                return fd, created
            os.close(fd)           # unlinked by the previous holder: retry
            LOG.debug("lock file of %s was replaced, retrying", container_id)

    @staticmethod
    def _open(path: str) -> tuple[int, bool]:
        flags = os.O_RDWR | os.O_CLOEXEC
        try:
            return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600), True
        except FileExistsError:
            return os.open(path, flags), False

    @staticmethod
    def _same_file(fd: int, path: str) -> bool:
        try:
            on_disk = os.stat(path)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)
