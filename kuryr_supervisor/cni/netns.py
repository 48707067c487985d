"""CNI_NETNS against the kernel: is this path a network namespace, and is it
a pod's rather than the host's or the daemon's own.

Role: the file-system half of request validation, kept apart from
:mod:`.protocol` (which only reads the request's JSON) so the kernel's
namespace interface, nsfs and its ioctl, is met in one module.

Invariants:
- only regular files are opened (nsfs files are regular files): a FIFO, or
  a device whose open has side effects, is refused before it is opened;
- a path that is missing or not a network namespace is the caller's error,
  a :class:`~kuryr_supervisor.errors.CNIError` (code 3 or 4), never an
  internal failure deep inside setns(2);
- the host's and the daemon's own namespaces are told by identity (device
  and inode), whatever the path that names them.
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat

from kuryr_supervisor import errors

_NS_GET_NSTYPE = 0xB703      # ioctl(2) on an nsfs file: its namespace type
_CLONE_NEWNET = 0x40000000


def checked(value: str, *, required: bool) -> str:
    """Check that CNI_NETNS names a network namespace.

    Why so strict: a path that is not a netns would make the plumbing fail
    deep inside setns(2) and count as an internal failure; caught here it is
    the caller's error (code 3 when it does not exist, 4 when it is not a
    network namespace).
    """
    if not value:
        if required:
            raise errors.InvalidEnvironment("CNI_NETNS is missing")
        return ""
    if not value.startswith("/") or "\0" in value:
        raise errors.InvalidEnvironment("CNI_NETNS must be an absolute path")
    if not required:
        return value            # DEL: the namespace may be long gone
    try:
        nstype = _nstype(value)
    except FileNotFoundError as exc:
        raise errors.ContainerUnknown(
            f"network namespace {value} does not exist") from exc
    except OSError as exc:
        raise errors.InvalidEnvironment(
            f"CNI_NETNS {value} cannot be used: {exc.strerror}") from exc
    if nstype != _CLONE_NEWNET:
        raise errors.InvalidEnvironment(
            f"CNI_NETNS {value} is not a network namespace")
    return value


def is_netns(path: str) -> bool:
    """True when ``path`` is (still) a network namespace."""
    try:
        return _nstype(path) == _CLONE_NEWNET
    except (OSError, ValueError):   # ValueError: a NUL byte in the path
        return False


def _nstype(path: str) -> int:
    """The namespace type of an nsfs file (0: not a namespace).

    nsfs files are regular files; anything else (a FIFO, a device whose
    open has side effects) is refused before it is opened.
    """
    if not stat.S_ISREG(os.stat(path).st_mode):
        return 0
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        return int(fcntl.ioctl(fd, _NS_GET_NSTYPE))
    except OSError as exc:
        if exc.errno in (errno.ENOTTY, errno.EINVAL):
            return 0
        raise
    finally:
        os.close(fd)


def host_netns_guard(path: str) -> None:
    """Refuse the daemon's own or the host's network namespace as a pod's.

    Compared by namespace identity (device and inode of the nsfs file), so
    every path to those namespaces (``/proc/self/ns/net``, ``/proc/1/ns/net``,
    a bind mount) is caught: a pod interface plumbed there would land on
    the host.
    """
    try:
        target = os.stat(path)
    except OSError:
        return                  # parse() already said whether it exists
    for own in ("/proc/self/ns/net", "/proc/1/ns/net"):
        try:
            ref = os.stat(own)
        except OSError:
            continue
        if (ref.st_dev, ref.st_ino) == (target.st_dev, target.st_ino):
            raise errors.InvalidEnvironment(
                f"CNI_NETNS {path} is the host's or the daemon's own network "
                "namespace", "a pod needs a network namespace of its own")
