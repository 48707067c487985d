"""A real daemon touches no file it did not create.

Each case starts the real daemon (a subprocess, tests/fixtures/daemon.py)
against files planted as another user or another CNI would plant them:
uid 65534 owning the state directory and a ``daemon.lock`` symlink to a
root-only file; upstream Kuryr's conflist and shim at the install paths;
our own files from an earlier run under a daemon that never becomes ready;
a world-readable configuration file holding the Keystone password.
"""
from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.cni import install
from tests.fixtures.daemon import Daemon, run_once, wait_until
from tests.unit.test_ownership import KURYR_CONFLIST, KURYR_SHIM

pytestmark = pytest.mark.privileged
NOBODY = 65534
CONFIG = 78


def refused(workdir: Path, options: dict[str, dict[str, Any]]) -> str:
    """Run the daemon expecting exit 78; its one stderr line."""
    code, stderr, _ = run_once(workdir, options)
    assert code == CONFIG, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def root_only(tmp_path: Path) -> Path:
    target = tmp_path / "root-only"
    target.write_text("root's secret\n")
    target.chmod(0o600)
    return target


@pytest.mark.parametrize("how", ["foreign", "group-writable"])
def test_an_untrusted_state_dir_exits_78_naming_it(tmp_path: Path,
                                                   how: str) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    if how == "foreign":
        os.chown(state, NOBODY, NOBODY)
    else:
        state.chmod(0o770)
    line = refused(tmp_path / "d", {"ipam": {"state_dir": str(state)}})
    assert line.startswith(f"kuryr-supervisor: configuration error: [ipam] "
                           f"state_dir {state}: {state} ")
    assert os.listdir(state) == []              # nothing written there


@pytest.mark.parametrize("directory", ["nobody's", "root's"])
def test_a_planted_lock_symlink_is_not_followed(tmp_path: Path,
                                                directory: str) -> None:
    """The issue's attack: nobody owns the state directory and links
    daemon.lock to a root-only file. Refused, as is the same link left in a
    directory root has since taken back; the target is intact either way."""
    target = root_only(tmp_path)
    before = target.stat()
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    link = state / "daemon.lock"
    link.symlink_to(target)
    os.lchown(link, NOBODY, NOBODY)
    if directory == "nobody's":
        os.chown(state, NOBODY, NOBODY)
    line = refused(tmp_path / "d", {"ipam": {"state_dir": str(state)}})
    assert f"[ipam] state_dir {state}" in line
    if directory == "root's":
        assert f"{link} is a symbolic link; refusing to follow it" in line
    else:
        assert "owned by uid 65534" in line
    after = target.stat()
    assert target.read_text() == "root's secret\n"
    assert (after.st_mtime_ns, after.st_size, after.st_mode) == \
        (before.st_mtime_ns, before.st_size, before.st_mode)
    assert link.is_symlink()


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Any]:
    """Start daemons installing into ``tmp_path``'s bin and net.d."""
    made: list[Daemon] = []
    bin_dir, conf_dir = tmp_path / "opt-cni-bin", tmp_path / "etc-cni-net.d"
    bin_dir.mkdir()
    conf_dir.mkdir()

    def start(**install_opts: Any) -> Daemon:
        workdir = tmp_path / f"d{len(made)}"
        workdir.mkdir()
        daemon = Daemon(workdir, {"cni_install": {
            "enabled": True, "bin_dir": bin_dir, "conf_dir": conf_dir,
            **install_opts}})
        made.append(daemon)
        return daemon.start()
    start.shim = bin_dir / "kuryr-cni"                   # type: ignore[attr-defined]
    start.conflist = conf_dir / "10-kuryr.conflist"      # type: ignore[attr-defined]
    yield start
    for daemon in made:
        daemon.close()


def not_ready_naming(daemon: Daemon, *paths: Path) -> str:
    def failing() -> str | None:
        if daemon.probe("/alive") != 200:
            return None
        code, body = daemon.get("/ready?verbose")
        return body if code == 503 and "[-]cni-install" in body else None
    try:
        body = wait_until(failing, 30)
    except TimeoutError:
        raise AssertionError(daemon.log()) from None
    line = next(x for x in body.splitlines() if x.startswith("[-]cni-install"))
    for path in paths:
        assert f"{path} was not written by kuryr-supervisor" in line
    assert "[cni_install] force = true" in line
    return line


def test_foreign_files_are_kept_and_named_until_force(host: Any) -> None:
    host.shim.write_bytes(KURYR_SHIM)
    host.shim.chmod(0o755)
    host.conflist.write_bytes(KURYR_CONFLIST)
    daemon = host()
    not_ready_naming(daemon, host.shim, host.conflist)
    time.sleep(1.0)                                # several check rounds
    assert daemon.probe("/ready") == 503 and daemon.probe("/startup") != 200
    assert host.shim.read_bytes() == KURYR_SHIM
    assert host.conflist.read_bytes() == KURYR_CONFLIST
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit(30) == 0
    forced = host(force=True)
    forced.wait_ready()
    wait_until(lambda: host.conflist.read_bytes() != KURYR_CONFLIST, 10)
    assert json.loads(host.conflist.read_text())["kuryrSupervisor"][
        "installedBy"] == "kuryr-supervisor"
    assert host.shim.read_bytes() != KURYR_SHIM
    assert "overwriting" in forced.log()


def test_uninstall_after_never_being_ready_removes_nothing(host: Any) -> None:
    """Our conflist from an earlier run and a foreign shim: the daemon never
    becomes ready, installs nothing, and on a graceful stop with
    uninstall_on_stop removes neither file."""
    ours = install.default_conflist("kuryr", "unix:///run/earlier.sock")
    host.conflist.write_bytes(ours)
    host.shim.write_bytes(KURYR_SHIM)
    daemon = host(uninstall_on_stop=True)
    not_ready_naming(daemon, host.shim)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit(30) == 0
    assert host.conflist.read_bytes() == ours
    assert host.shim.read_bytes() == KURYR_SHIM
    assert "installed nothing; removing nothing" in daemon.log()


def test_uninstall_removes_what_this_run_installed(host: Any) -> None:
    daemon = host(uninstall_on_stop=True)
    daemon.wait_ready()
    wait_until(lambda: host.shim.exists() and host.conflist.exists(), 10)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit(30) == 0
    assert not host.shim.exists() and not host.conflist.exists()


@pytest.mark.parametrize("mode", [0o644, 0o600])
def test_a_readable_config_file_with_a_secret_gets_one_warning(
        tmp_path: Path, mode: int) -> None:
    daemon = Daemon(tmp_path, {"neutron": {
        "auth_type": "password", "auth_url": "http://127.0.0.1:1/v3",
        "username": "kuryr", "password": "s3cret"}})
    daemon.config.chmod(mode)
    try:
        daemon.start()
        daemon.wait_ready()
        warned = [line for line in daemon.log().splitlines()
                  if "holds a secret" in line]
    finally:
        daemon.close()
    if mode == 0o600:
        assert warned == []
        return
    assert len(warned) == 1, daemon.log()
    assert "WARNING" in warned[0]
    assert (f"configuration file {daemon.config} holds a secret (password) "
            "and is readable by group or others (mode 0644)") in warned[0]
