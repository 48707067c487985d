"""The installer writes and removes only its own files; ``force`` overrides.

Another CNI's conflist or ``kuryr-cni`` at the install paths is never
overwritten (the install raises before writing anything) and is named by
the ``cni-install`` readiness check; uninstall removes only what this run
installed and still carries our marker.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from oslo_config import cfg

from kuryr_supervisor.cni import install
from kuryr_supervisor.health.checks.install import InstallPathsCheck
from tests.unit.test_install import install_conf
from tests.unit.test_ownership import KURYR_CONFLIST, KURYR_SHIM


@pytest.fixture
def conf(tmp_path: Path) -> cfg.ConfigOpts:
    """test_install's options, with both install directories made."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "net.d").mkdir()
    return install_conf(tmp_path)


def paths(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "bin" / "kuryr-cni", tmp_path / "net.d" / "10-kuryr.conflist"


def installer(conf: cfg.ConfigOpts) -> install.InstallOnFirstReady:
    return install.InstallOnFirstReady(conf, compiled=None)


@pytest.mark.parametrize("foreign", ["shim", "conflist"])
def test_a_foreign_file_is_not_overwritten_and_nothing_is_written(
        conf: cfg.ConfigOpts, tmp_path: Path, foreign: str) -> None:
    shim, conflist = paths(tmp_path)
    planted, other = (shim, conflist) if foreign == "shim" else (conflist, shim)
    planted.write_bytes(KURYR_SHIM if foreign == "shim" else KURYR_CONFLIST)
    with pytest.raises(install.ForeignFile, match=f"{planted} was not written "
                       "by kuryr-supervisor.*force = true"):
        install.install_on_first_ready(conf)
    on_verdict = installer(conf)
    assert not on_verdict(True) and not on_verdict.done
    assert on_verdict.installed == []
    assert planted.read_bytes() in (KURYR_SHIM, KURYR_CONFLIST)
    assert not other.exists()                  # not half an install either
    check = InstallPathsCheck(conf).run(0.0)
    assert not check.ok and str(planted) in check.message
    assert "[cni_install] force = true" in check.message


def test_force_overwrites(conf: cfg.ConfigOpts, tmp_path: Path) -> None:
    shim, conflist = paths(tmp_path)
    shim.write_bytes(KURYR_SHIM)
    conflist.write_bytes(KURYR_CONFLIST)
    conf.set_override("force", True, "cni_install")
    check = InstallPathsCheck(conf)
    result = check.run(0.0)
    assert result.ok and "will be overwritten" in result.message
    on_verdict = installer(conf)
    assert on_verdict(True)
    assert on_verdict.installed == [str(shim), str(conflist)]
    assert json.loads(conflist.read_text())["kuryrSupervisor"]
    conf.set_override("force", False, "cni_install")
    assert check.run(0.0).ok                   # ours now, whatever force says


def test_the_check_follows_the_files(conf: cfg.ConfigOpts,
                                     tmp_path: Path) -> None:
    shim, conflist = paths(tmp_path)
    check = InstallPathsCheck(conf)
    assert check.run(0.0).ok                   # nothing there yet
    assert installer(conf)(True)
    assert check.run(0.0).ok
    conflist.write_bytes(KURYR_CONFLIST)       # another CNI replaces ours
    assert not check.run(0.0).ok
    conflist.unlink()
    assert check.run(0.0).ok
    conf.set_override("enabled", False, "cni_install")
    shim.write_bytes(KURYR_SHIM)
    assert check.run(0.0).ok                   # not installing: not our business


def stop_conf(conf: cfg.ConfigOpts) -> cfg.ConfigOpts:
    conf.set_override("uninstall_on_stop", True, "cni_install")
    return conf


def test_uninstall_removes_what_this_run_installed(conf: cfg.ConfigOpts,
                                                   tmp_path: Path) -> None:
    shim, conflist = paths(tmp_path)
    on_verdict = installer(conf)
    assert on_verdict(True)
    removed = install.uninstall_on_stop(stop_conf(conf), 0, on_verdict.installed)
    assert removed == [str(conflist), str(shim)]   # conflist first
    assert not shim.exists() and not conflist.exists()


def test_a_run_that_installed_nothing_removes_nothing(conf: cfg.ConfigOpts,
                                                      tmp_path: Path) -> None:
    """Our own files from an earlier run stay when this run never became
    ready: it installed nothing."""
    shim, conflist = paths(tmp_path)
    assert installer(conf)(True)               # an earlier run
    never_ready = installer(conf)
    never_ready(False)
    assert install.uninstall_on_stop(stop_conf(conf), 0,
                                     never_ready.installed) == []
    assert shim.exists() and conflist.exists()


def test_a_file_replaced_since_is_not_removed(conf: cfg.ConfigOpts,
                                              tmp_path: Path) -> None:
    shim, conflist = paths(tmp_path)
    on_verdict = installer(conf)
    assert on_verdict(True)
    conflist.write_bytes(KURYR_CONFLIST)       # another CNI took the path
    removed = install.uninstall_on_stop(stop_conf(conf), 0, on_verdict.installed)
    assert removed == [str(shim)]
    assert conflist.read_bytes() == KURYR_CONFLIST


def test_uninstall_only_on_a_graceful_stop_when_asked(conf: cfg.ConfigOpts,
                                                      tmp_path: Path) -> None:
    on_verdict = installer(conf)
    assert on_verdict(True)
    assert install.uninstall_on_stop(conf, 0, on_verdict.installed) == []
    assert install.uninstall_on_stop(stop_conf(conf), 1,
                                     on_verdict.installed) == []
    assert all(Path(p).exists() for p in on_verdict.installed)
