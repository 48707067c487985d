"""``[ipam] state_dir``: trusted like the socket's directory, locked safely.

The daemon writes its lock, the IPAM store, the pod registry and the
per-container locks there, by predictable names. Whoever else could write
in the directory could plant a symlink at one of those names and have the
daemon truncate or overwrite the file it points to. So, as
:func:`~kuryr_supervisor.cni.sockets.check_trusted` wants for the socket's
directory (sshd's StrictModes): the directory and every ancestor (after
symlinks) owned by a trusted uid and not group/other-writable, root-owned
sticky ancestors such as /tmp accepted. A missing directory is created 0700
and checked again once it exists (another user may have made it first, or
a loose umask its parents). What an earlier, looser directory may have let
someone plant is refused too: every entry, and every entry of a
subdirectory, must be a trusted uid's and no symlink.

The trusted uids are root and the daemon's own effective uid (:func:`owners`):
for the CNI role, which runs as root, that is root alone; a daemon run as an
unprivileged uid (the controller role's Deployment) trusts its own files as
sshd and systemd trust a user's own, and nobody else's -- a directory of
another non-root uid is refused as before.

``daemon.lock`` is opened with O_NOFOLLOW and without O_TRUNC; only a plain
file of the daemon's own uid with one link is taken, and its old content
(the previous pid) is replaced only once the ``flock`` is held.
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat
from typing import IO

from kuryr_supervisor.cni import sockets

LOCK_FILE = "daemon.lock"


class Untrusted(Exception):
    """The directory, an entry or the lock file could be another user's."""


class Busy(Exception):
    """Another daemon holds the lock."""


def owners(euid: int | None = None) -> tuple[int, ...]:
    """The uids whose files and directories the daemon trusts: root, and
    its own effective uid when that is not root."""
    euid = os.geteuid() if euid is None else euid
    return (0,) if euid == 0 else (0, euid)


def check(state_dir: str, *, euid: int | None = None) -> None:
    """The trust checks alone: nothing created, nothing locked (what
    ``kuryr-supervisor check-config`` runs beside a running daemon).
    ``euid``: the uid the daemon runs as (default: this process's)."""
    trusted = owners(euid)
    if os.path.lexists(state_dir) and not os.path.isdir(state_dir):
        raise Untrusted(f"[ipam] state_dir {state_dir} exists and is "
                        "not a directory")
    _state_dir_trusted(state_dir, trusted)
    if os.path.isdir(state_dir):
        _state_dir_entries(state_dir, trusted)


def lock(state_dir: str) -> IO[str]:
    """The held lock of a trusted ``state_dir`` (created 0700 if missing)."""
    check(state_dir)
    trusted = owners()
    try:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise Untrusted(f"[ipam] state_dir {state_dir}: "
                        f"{exc.strerror}") from exc
    # Again, on what exists now: another user may have made the directory
    # (or a loose umask its parents) since the first look.
    _state_dir_trusted(state_dir, trusted)
    _state_dir_entries(state_dir, trusted)
    lock = _open_lock(state_dir)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        lock.seek(0)
        holder = lock.read(64).strip() or "unknown"
        lock.close()
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise Busy(f"[ipam] state_dir {state_dir} is in use by "
                       f"another kuryr-supervisor (pid {holder})"
                       ) from exc
        raise Untrusted(f"[ipam] state_dir {state_dir}: cannot lock "
                        f"{LOCK_FILE}: {exc.strerror}") from exc
    # Ours and locked: only now is the old content replaced.
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def _state_dir_trusted(state_dir: str, trusted: tuple[int, ...]) -> None:
    """The socket directory's rule (sshd's StrictModes): ``state_dir`` and
    every ancestor owned by a ``trusted`` uid and not group/other-writable
    (root-owned sticky ancestors such as /tmp accepted), or another user
    could plant links where the daemon writes its lock, store and
    registry."""
    try:
        sockets.check_trusted(os.path.join(state_dir, LOCK_FILE),
                              owners=trusted)
        _links_on_the_way(state_dir, trusted)
    except sockets.UntrustedPath as exc:
        raise Untrusted(f"[ipam] state_dir {state_dir}: {exc}; "
                        "refusing a state directory another user "
                        "could change") from exc


def _links_on_the_way(state_dir: str, trusted: tuple[int, ...]) -> None:
    """check_trusted judges the path after symlinks; a symlink on the way
    (``/tmp/state -> /var/lib/ks``) must itself be a ``trusted`` uid's, in
    a directory of a ``trusted`` uid that group and others cannot write
    (sticky or not), or someone else could point it elsewhere while the
    daemon runs and opens files through it."""
    prefix = "/"
    for part in os.path.abspath(state_dir).strip("/").split("/"):
        prefix = os.path.join(prefix, part)
        try:
            st = os.lstat(prefix)
        except FileNotFoundError:
            return
        if not stat.S_ISLNK(st.st_mode):
            continue
        if st.st_uid not in trusted:
            raise sockets.UntrustedPath(
                f"{prefix} is a symbolic link owned by uid {st.st_uid}, "
                f"not {sockets.owner_names(trusted)}")
        directory = os.path.dirname(prefix)
        where = os.stat(directory)
        if where.st_uid not in trusted:
            raise sockets.UntrustedPath(
                f"{prefix} is a symbolic link in {directory}, which uid "
                f"{where.st_uid} owns (not {sockets.owner_names(trusted)})")
        mode = where.st_mode
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise sockets.UntrustedPath(
                f"{prefix} is a symbolic link in {directory}, which group "
                f"or others can write (mode {stat.S_IMODE(mode):04o})")


def _state_dir_entries(state_dir: str, trusted: tuple[int, ...]) -> None:
    """What an earlier, looser directory may have let another user plant
    stays refused once the directory is fixed: every entry (the store, the
    registry, ``locks/`` and what is in it) must be a ``trusted`` uid's
    and no symlink, and a directory among them not group/other-writable.
    One the daemon cannot read (another uid's 0700 directory: the CNI
    role's state, met by a non-root start) is refused the same way."""
    try:
        for top in os.scandir(state_dir):
            _state_entry(state_dir, top, trusted)
            if top.is_dir(follow_symlinks=False):
                for inner in os.scandir(top.path):
                    _state_entry(state_dir, inner, trusted)
    except PermissionError as exc:
        raise Untrusted(f"[ipam] state_dir {state_dir}: cannot read "
                        f"{exc.filename} as uid {os.geteuid()}: "
                        f"{exc.strerror}") from exc


def _state_entry(state_dir: str, entry: os.DirEntry[str],
                 trusted: tuple[int, ...]) -> None:
    st = entry.stat(follow_symlinks=False)
    why = ""
    if stat.S_ISLNK(st.st_mode):
        why = "is a symbolic link; refusing to follow it"
    elif st.st_uid not in trusted:
        why = (f"is owned by uid {st.st_uid}, not "
               f"{sockets.owner_names(trusted)}")
    elif stat.S_ISDIR(st.st_mode) and st.st_mode & (stat.S_IWGRP
                                                    | stat.S_IWOTH):
        why = (f"is writable by group or others (mode "
               f"{stat.S_IMODE(st.st_mode):04o})")
    if why:
        raise Untrusted(f"[ipam] state_dir {state_dir}: {entry.path} "
                        f"{why}")


def _open_lock(state_dir: str) -> IO[str]:
    """``daemon.lock``, never through a symlink and never truncated before
    it is ours: opened without O_TRUNC, and only a plain file of our own
    uid with one link is taken (a planted hard link or device is refused;
    a root-owned lock a non-root daemon could write would be writable by
    group or others)."""
    path = os.path.join(state_dir, LOCK_FILE)
    flags = (os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
             | os.O_CLOEXEC)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        why = ("is a symbolic link; refusing to follow it"
               if exc.errno == errno.ELOOP else f"cannot be opened: "
               f"{exc.strerror}")
        raise Untrusted(f"[ipam] state_dir {state_dir}: {path} {why}"
                        ) from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() \
            or st.st_nlink != 1:
        os.close(fd)
        raise Untrusted(f"[ipam] state_dir {state_dir}: {path} is not a "
                        "plain file of ours (owner uid "
                        f"{st.st_uid}, {st.st_nlink} links); remove it")
    return os.fdopen(fd, "r+")
