"""``[ipam] state_dir`` trust for a daemon run as a non-root uid (the
controller role's Deployment): root's and its own uid's directories and
files are trusted, another non-root uid's never; the root daemon (the CNI
role) still trusts root's alone.

Ownership is made for real with chown; the daemon's uid is injected into
the checks (``euid=``), and the lock is taken by a real process running as
that uid (``subprocess`` with ``user=``/``group=``).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kuryr_supervisor.master import statedir
from tests.fixtures import unprivileged

pytestmark = pytest.mark.privileged
DAEMON = 65532          # the Deployment's runAsUser
OTHER = 65534           # nobody: some other unprivileged user


def tree(tmp_path: Path, owner: int, *, mode: int = 0o700) -> Path:
    """``<tmp>/home/state``, both owned by ``owner``."""
    home = tmp_path / "home"
    state = home / "state"
    state.mkdir(parents=True, mode=0o700)
    home.chmod(0o755)
    state.chmod(mode)
    for path in (home, state):
        os.chown(path, owner, owner)
    return state


def test_owners() -> None:
    assert statedir.owners(0) == (0,)
    assert statedir.owners(DAEMON) == (0, DAEMON)
    assert statedir.owners() == statedir.owners(os.geteuid())


def test_its_own_directory_and_entries_pass(tmp_path: Path) -> None:
    state = tree(tmp_path, DAEMON)
    (state / "locks").mkdir(mode=0o700)
    os.chown(state / "locks", DAEMON, DAEMON)
    (state / "daemon.lock").touch()
    os.chown(state / "daemon.lock", DAEMON, DAEMON)
    (state / "ipam.sqlite").touch()          # root's: trusted too
    statedir.check(str(state), euid=DAEMON)


@pytest.mark.parametrize("where", ["state", "ancestor", "entry", "inner"])
def test_another_non_root_uids_is_refused(tmp_path: Path, where: str) -> None:
    """Trusting our own uid trusts no other: OTHER's directory, ancestor,
    file or file of a subdirectory is refused, named with both owners."""
    state = tree(tmp_path, DAEMON)
    (state / "locks").mkdir(mode=0o700)
    os.chown(state / "locks", DAEMON, DAEMON)
    named = {"state": state, "ancestor": state.parent,
             "entry": state / "ipam.sqlite",
             "inner": state / "locks" / "x.lock"}[where]
    if where in ("entry", "inner"):
        named.touch()
    os.chown(named, OTHER, OTHER)
    with pytest.raises(statedir.Untrusted) as err:
        statedir.check(str(state), euid=DAEMON)
    message = str(err.value)
    assert message.startswith(f"[ipam] state_dir {state}: {named} ")
    assert f"owned by uid {OTHER}, not root or uid {DAEMON}" in message
    assert "\n" not in message


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o1777])
def test_its_own_directory_open_to_others_is_refused(tmp_path: Path,
                                                     mode: int) -> None:
    state = tree(tmp_path, DAEMON, mode=mode)
    with pytest.raises(statedir.Untrusted,
                       match="writable by group or others"):
        statedir.check(str(state), euid=DAEMON)


def test_its_own_sticky_ancestor_is_no_tmp(tmp_path: Path) -> None:
    """The sticky exception is root's: a 1777 directory of the daemon's uid
    is not /tmp (its owner is not the only one that matters there, but it
    is no root-owned system directory either)."""
    state = tree(tmp_path, DAEMON)
    state.parent.chmod(0o1777)
    with pytest.raises(statedir.Untrusted, match="writable by group"):
        statedir.check(str(state), euid=DAEMON)


def test_the_root_daemon_still_trusts_root_alone(tmp_path: Path) -> None:
    """The CNI role runs as root: a directory of the controller's uid is
    another user's to it, as before."""
    state = tree(tmp_path, DAEMON)
    with pytest.raises(statedir.Untrusted,
                       match=f"owned by uid {DAEMON}, not root;"):
        statedir.check(str(state), euid=0)


@pytest.mark.parametrize("link_owner,dir_owner,ok", [
    (DAEMON, DAEMON, True), (0, 0, True),
    (OTHER, DAEMON, False), (0, OTHER, False), (DAEMON, OTHER, False)])
def test_a_symlink_on_the_way(tmp_path: Path, link_owner: int, dir_owner: int,
                              ok: bool) -> None:
    """A link on the configured path, and the directory holding it, must
    be a trusted uid's: whoever owns either could point it elsewhere."""
    real = tree(tmp_path, DAEMON)
    where = tmp_path / "where"
    where.mkdir(mode=0o755)
    os.chown(where, dir_owner, dir_owner)
    link = where / "state"
    link.symlink_to(real)
    os.lchown(link, link_owner, link_owner)
    if ok:
        statedir.check(str(link), euid=DAEMON)
        return
    with pytest.raises(statedir.Untrusted, match=f"{link} is a symbolic link"):
        statedir.check(str(link), euid=DAEMON)


def test_a_root_link_in_another_users_directory_is_refused_to_root(
        tmp_path: Path) -> None:
    """The root daemon too: the owner of a 0755 directory can replace the
    root-owned link in it."""
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    where = tmp_path / "where"
    where.mkdir(mode=0o755)
    os.chown(where, OTHER, OTHER)
    (where / "state").symlink_to(real)
    with pytest.raises(statedir.Untrusted, match=f"which uid {OTHER} owns"):
        statedir.check(str(where / "state"), euid=0)


LOCK = ("import os, sys; from kuryr_supervisor.master import statedir\n"
        "try:\n"
        "    lock = statedir.lock(sys.argv[1])\n"
        "except statedir.Untrusted as exc:\n"
        "    sys.exit(f'untrusted: {exc}')\n"
        "print(os.geteuid(), open(os.path.join(sys.argv[1], 'daemon.lock'))"
        ".read().strip() == str(os.getpid()))\n")


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A root-owned 0755 directory in /tmp: pytest's own base is 0700, so
    another uid could not even reach a directory under it."""
    path = Path(tempfile.mkdtemp(prefix="ks-statedir-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def lock_as(uid: int, state: Path) -> subprocess.CompletedProcess[str]:
    """``statedir.lock`` in a real process of ``uid``, nothing else."""
    script = Path(state).parent / "lock.py"
    script.write_text(LOCK)
    script.chmod(0o644)
    return subprocess.run([*unprivileged.python(uid, uid)[:-1], str(script),
                           str(state)], capture_output=True, text=True,
                          timeout=60, cwd="/")


def test_a_non_root_process_locks_its_own_directory(reachable: Path) -> None:
    """Created by it under a root-owned /tmp-like directory, as in the
    Deployment's memory-backed emptyDir."""
    shared = reachable / "volume"
    shared.mkdir()
    shared.chmod(0o1777)
    done = lock_as(DAEMON, shared / "state")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(DAEMON), "True"]
    st = (shared / "state" / "daemon.lock").stat()
    assert (st.st_uid, st.st_mode & 0o777) == (DAEMON, 0o600)
    # the next one, as root, refuses the controller's directory
    with pytest.raises(statedir.Untrusted, match=f"uid {DAEMON}, not root"):
        statedir.lock(str(shared / "state"))


def test_a_non_root_process_refuses_a_root_lock(reachable: Path) -> None:
    """A lock it did not make (root's, writable by others so that it can
    be opened) is not taken."""
    state = tree(reachable, DAEMON)
    lock = state / "daemon.lock"
    lock.write_text("4242\n")
    lock.chmod(0o666)
    done = lock_as(DAEMON, state)
    assert done.returncode == 1
    assert "untrusted" in done.stderr and "not a plain file of ours" in done.stderr
    assert lock.read_text() == "4242\n"



def test_a_directory_it_cannot_read_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root's 0700 state (the CNI role's default) met by a start or a
    check-config without root: a refusal naming it, never a traceback.
    Root reads any directory, so the kernel's answer to another uid is
    given here (the subprocesses above keep CAP_DAC_READ_SEARCH)."""
    state = tree(tmp_path, 0)
    (state / "ipam.db").write_text("")

    def denied(path: str) -> object:
        raise PermissionError(13, "Permission denied", path)
    monkeypatch.setattr(statedir.os, "scandir", denied)
    with pytest.raises(statedir.Untrusted) as err:
        statedir.check(str(state))
    assert str(err.value) == (
        f"[ipam] state_dir {state}: cannot read {state} as uid "
        f"{os.geteuid()}: Permission denied")
