"""``[ipam] state_dir`` trust and its ``daemon.lock``, on injected paths.

Foreign ownership is made for real with chown to uid 65534 (nobody), the
user that plants links in the issue's attack.
"""
from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

import pytest

from kuryr_supervisor.master import preflight

pytestmark = pytest.mark.privileged
NOBODY = 65534


def secret_file(tmp_path: Path) -> Path:
    target = tmp_path / "root-only"
    target.write_text("root's secret\n")
    target.chmod(0o600)
    return target


def test_a_missing_state_dir_is_created_0700(tmp_path: Path) -> None:
    state = tmp_path / "a" / "state"
    lock = preflight._state_dir_lock(str(state))
    try:
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        assert (state / "daemon.lock").read_text() == f"{os.getpid()}\n"
        assert stat.S_IMODE((state / "daemon.lock").stat().st_mode) == 0o600
    finally:
        lock.close()


@pytest.mark.parametrize("how", ["foreign", "group-writable",
                                 "other-writable", "foreign-parent",
                                 "sticky-itself"])
def test_an_untrusted_state_dir_is_refused(tmp_path: Path, how: str) -> None:
    parent = tmp_path / "p"
    state = parent / "state"
    state.mkdir(parents=True, mode=0o700)
    named = state
    if how == "foreign":
        os.chown(state, NOBODY, NOBODY)
    elif how == "group-writable":
        state.chmod(0o770)
    elif how == "other-writable":
        state.chmod(0o707)
    elif how == "foreign-parent":
        os.chown(parent, NOBODY, NOBODY)
        named = parent
    else:                               # /tmp's mode, but for itself: no
        state.chmod(0o1777)
    with pytest.raises(preflight.PreflightError) as err:
        preflight._state_dir_lock(str(state))
    assert str(err.value).startswith(f"[ipam] state_dir {state}: {named} ")
    assert "\n" not in str(err.value)
    assert not (state / "daemon.lock").exists()


def test_a_root_sticky_ancestor_is_accepted(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    preflight._state_dir_lock(str(shared / "state")).close()


def test_a_state_dir_made_by_another_user_meanwhile_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second look: a directory that exists when makedirs runs is
    checked as it is then, whoever made it."""
    state = tmp_path / "state"
    real_makedirs = os.makedirs

    def racing(path: str, mode: int = 0o777, exist_ok: bool = False) -> None:
        real_makedirs(path, mode, exist_ok)
        os.chown(path, NOBODY, NOBODY)      # as if nobody had won the race

    monkeypatch.setattr(preflight.os, "makedirs", racing)
    with pytest.raises(preflight.PreflightError, match="uid 65534"):
        preflight._state_dir_lock(str(state))
    monkeypatch.undo()
    assert not (state / "daemon.lock").exists()


def test_a_planted_lock_symlink_is_never_followed(tmp_path: Path) -> None:
    """The issue's attack with the directory trusted (say it was fixed
    after the link was planted): the link is refused, the target intact."""
    target = secret_file(tmp_path)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    link = state / "daemon.lock"
    link.symlink_to(target)
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(preflight.PreflightError,
                       match=f"{link} is a symbolic link; refusing"):
        preflight._state_dir_lock(str(state))
    assert target.read_text() == "root's secret\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


@pytest.mark.parametrize("kind", ["hard link", "foreign file", "fifo"])
def test_a_lock_that_is_not_a_plain_root_file_is_refused(
        tmp_path: Path, kind: str) -> None:
    target = secret_file(tmp_path)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    lock = state / "daemon.lock"
    if kind == "hard link":
        os.link(target, lock)
    elif kind == "foreign file":
        lock.write_text("4242\n")
        os.chown(lock, NOBODY, NOBODY)
    else:
        os.mkfifo(lock)
    with pytest.raises(preflight.PreflightError,
                       match="not a plain file|uid 65534, not root"):
        preflight._state_dir_lock(str(state))
    assert target.read_text() == "root's secret\n"
    if kind == "foreign file":
        assert lock.read_text() == "4242\n"


def test_the_holders_pid_survives_a_second_daemon(tmp_path: Path) -> None:
    """No truncation before the lock is ours: the refused second daemon
    names the first one's pid and leaves it in the file."""
    state = tmp_path / "state"
    first = preflight._state_dir_lock(str(state))
    try:
        with pytest.raises(preflight.AlreadyRunning,
                           match=f"pid {os.getpid()}"):
            preflight._state_dir_lock(str(state))
        assert (state / "daemon.lock").read_text() == f"{os.getpid()}\n"
        with pytest.raises(BlockingIOError):
            with open(state / "daemon.lock") as probe:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        first.close()
    # a stale longer pid from an earlier run is replaced whole
    (state / "daemon.lock").write_text("1234567890\n")
    preflight._state_dir_lock(str(state)).close()
    assert (state / "daemon.lock").read_text() == f"{os.getpid()}\n"


@pytest.mark.parametrize("planted", ["store symlink", "foreign locks dir",
                                     "open locks dir", "lock symlink in locks"])
def test_what_a_looser_past_let_others_plant_is_refused(
        tmp_path: Path, planted: str) -> None:
    """A directory once writable by nobody, since fixed: what nobody left
    there (the store's name linked to a root file, a locks/ of theirs, a
    per-container lock linked away) keeps the daemon from starting."""
    target = secret_file(tmp_path)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    locks = state / "locks"
    if planted == "store symlink":
        bad = state / "ipam.sqlite"
        bad.symlink_to(target)
        os.lchown(bad, NOBODY, NOBODY)
        why = "is a symbolic link"
    elif planted in ("foreign locks dir", "open locks dir"):
        locks.mkdir()
        if planted == "foreign locks dir":
            os.chown(locks, NOBODY, NOBODY)
            why = "owned by uid 65534"
        else:
            locks.chmod(0o777)
            why = "writable by group or others (mode 0777)"
        bad = locks
    else:
        locks.mkdir(mode=0o700)
        bad = locks / ("a" * 64 + ".lock")
        bad.symlink_to(target)
        why = "is a symbolic link"
    with pytest.raises(preflight.PreflightError) as err:
        preflight._state_dir_lock(str(state))
    assert f"[ipam] state_dir {state}: {bad} " in str(err.value)
    assert why in str(err.value)
    assert target.read_text() == "root's secret\n"


def test_the_daemons_own_entries_pass(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "locks").mkdir(parents=True, mode=0o700)
    state.chmod(0o700)
    (state / "locks" / ("b" * 64 + ".lock")).touch()
    (state / "ipam.sqlite").touch()
    (state / "ipam.sqlite-wal").touch()
    preflight._state_dir_lock(str(state)).close()


@pytest.mark.parametrize("link", ["nobody's", "in /tmp-like", "root's"])
def test_a_symlink_on_the_way_must_be_roots_where_only_root_writes(
        tmp_path: Path, link: str) -> None:
    """``state_dir = <dir>/state`` linked to a trusted directory: judged
    after symlinks alone it passes, yet whoever owns the link (or can
    replace it) could point it at their own directory while we run."""
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    where = tmp_path / "where"
    where.mkdir()
    if link == "in /tmp-like":
        where.chmod(0o1777)
    state = where / "state"
    state.symlink_to(real)
    if link == "nobody's":
        os.lchown(state, NOBODY, NOBODY)
    if link == "root's":
        preflight._state_dir_lock(str(state)).close()
        assert (real / "daemon.lock").exists()
        return
    with pytest.raises(preflight.PreflightError,
                       match=f"{state} is a symbolic link"):
        preflight._state_dir_lock(str(state))
    assert not (real / "daemon.lock").exists()
