"""Installing the shim and the conflist once the daemon is ready."""
from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from oslo_config import cfg

from kuryr_supervisor.cni import install
from kuryr_supervisor.conf import cni_install

SHIM = '#!/usr/bin/python3 -S\n"""A stand-in shim."""\nprint("kuryr-cni")\n'


@pytest.fixture
def conf(tmp_path: Path) -> cfg.ConfigOpts:
    return install_conf(tmp_path)


def install_conf(tmp_path: Path) -> cfg.ConfigOpts:
    """``[cni_install]`` enabled, installing below ``tmp_path``."""
    conf = cfg.ConfigOpts()
    cni_install.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override("enabled", True, "cni_install")
    conf.set_override("bin_dir", str(tmp_path / "bin"), "cni_install")
    conf.set_override("conf_dir", str(tmp_path / "net.d"), "cni_install")
    return conf


@pytest.fixture
def shim(tmp_path: Path) -> str:
    path = tmp_path / "shim.py"
    path.write_text(SHIM)
    return str(path)


def test_nothing_before_ready_everything_after(conf: cfg.ConfigOpts,
                                               shim: str, tmp_path: Path) -> None:
    on_verdict = install.InstallOnFirstReady(conf, shim_source=shim, compiled=None)
    for _ in range(3):
        assert not on_verdict(False)
    assert not (tmp_path / "bin").exists() and not (tmp_path / "net.d").exists()
    assert on_verdict(True)
    binary = tmp_path / "bin" / "kuryr-cni"
    conflist = tmp_path / "net.d" / "10-kuryr.conflist"
    assert stat.S_IMODE(binary.stat().st_mode) == 0o755
    assert binary.read_text().startswith("#!/usr/bin/env python3\n")
    assert binary.read_text().count("#!") == 1
    assert subprocess.run([str(binary)], capture_output=True, text=True,
                          check=True).stdout == "kuryr-cni\n"
    data = json.loads(conflist.read_text())
    assert data["plugins"][0]["type"] == "kuryr-cni"
    assert data["name"] == "kuryr" and data["cniVersion"]
    # the shim is in place before the conflist (the kubelet's trigger)
    assert binary.stat().st_mtime_ns <= conflist.stat().st_mtime_ns
    # once only; no temporary files left behind
    assert not on_verdict(True)
    assert sorted(os.listdir(tmp_path / "net.d")) == ["10-kuryr.conflist"]
    assert sorted(os.listdir(tmp_path / "bin")) == ["kuryr-cni"]


def test_disabled_installs_nothing(conf: cfg.ConfigOpts, shim: str,
                                   tmp_path: Path) -> None:
    conf.set_override("enabled", False, "cni_install")
    assert not install.InstallOnFirstReady(conf, shim_source=shim, compiled=None)(True)
    assert not install.install_on_first_ready(conf, shim_source=shim)
    assert not (tmp_path / "bin").exists()


def test_template_and_idempotent_rewrite(conf: cfg.ConfigOpts, shim: str,
                                         tmp_path: Path) -> None:
    template = tmp_path / "t.conflist"
    template.write_text('{"cniVersion": "0.4.0", "name": "k", "plugins": []}')
    conf.set_override("conflist_template", str(template), "cni_install")
    install.install_on_first_ready(conf, shim_source=shim)
    target = tmp_path / "net.d" / "10-kuryr.conflist"
    inode = target.stat().st_ino
    assert json.loads(target.read_text())["cniVersion"] == "0.4.0"
    install.install_on_first_ready(conf, shim_source=shim)
    assert target.stat().st_ino == inode       # unchanged file left alone


def test_a_broken_template_is_refused(conf: cfg.ConfigOpts, shim: str,
                                      tmp_path: Path) -> None:
    template = tmp_path / "t.conflist"
    template.write_text("{not json")
    conf.set_override("conflist_template", str(template), "cni_install")
    on_verdict = install.InstallOnFirstReady(conf, shim_source=shim, compiled=None)
    assert not on_verdict(True) and not on_verdict.done
    assert not (tmp_path / "net.d" / "10-kuryr.conflist").exists()


def test_atomic_write_replaces_not_rewrites(tmp_path: Path) -> None:
    path = tmp_path / "f"
    assert install.atomic_write(str(path), b"one", 0o755)
    held = open(path, "rb")                     # a running old shim
    assert install.atomic_write(str(path), b"two", 0o755)
    assert held.read() == b"one" and path.read_bytes() == b"two"
    held.close()
    assert not install.atomic_write(str(path), b"two", 0o755)


def test_the_real_shim_installs_and_answers_version(tmp_path: Path) -> None:
    from kuryr_supervisor.conf import cni_daemon
    conf = cfg.ConfigOpts()
    cni_install.register_opts(conf)
    cni_daemon.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override("enabled", True, "cni_install")
    conf.set_override("bin_dir", str(tmp_path / "bin"), "cni_install")
    conf.set_override("conf_dir", str(tmp_path / "net.d"), "cni_install")
    conf.set_override("bind_address", "unix:///tmp/x.sock", "cni_daemon")
    assert install.InstallOnFirstReady(conf)(True)
    binary = str(tmp_path / "bin" / "kuryr-cni")
    out = subprocess.run([binary], env={"CNI_COMMAND": "VERSION",
                                        "PATH": os.environ["PATH"]},
                         input='{"cniVersion": "1.0.0"}', capture_output=True,
                         text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    assert "1.0.0" in json.loads(out.stdout)["supportedVersions"]
    conflist = json.loads((tmp_path / "net.d" / "10-kuryr.conflist").read_text())
    assert conflist["plugins"][0]["daemon_socket"] == "unix:///tmp/x.sock"


def test_configured_interpreter_line_is_used(conf: cfg.ConfigOpts, shim: str,
                                             tmp_path: Path) -> None:
    conf.set_override("shim_interpreter", "/usr/bin/env -S python3 -I -S",
                      "cni_install")
    assert install.InstallOnFirstReady(conf, shim_source=shim, compiled=None)(True)
    binary = tmp_path / "bin" / "kuryr-cni"
    assert binary.read_text().splitlines()[0] == "#!/usr/bin/env -S python3 -I -S"
    done = subprocess.run([str(binary)], capture_output=True, text=True,
                          timeout=30)
    assert done.stdout.strip() == "kuryr-cni"


def test_compiled_shim_is_preferred_when_built(conf: cfg.ConfigOpts, shim: str,
                                               tmp_path: Path) -> None:
    binary = tmp_path / "built" / "kuryr-cni"
    binary.parent.mkdir()
    binary.write_bytes(b"\x7fELF fake executable")
    binary.chmod(0o755)
    assert install.InstallOnFirstReady(conf, shim_source=shim,
                                       compiled=str(binary))(True)
    installed = tmp_path / "bin" / "kuryr-cni"
    assert installed.read_bytes() == binary.read_bytes()
    assert stat.S_IMODE(installed.stat().st_mode) == 0o755


@pytest.mark.parametrize("state", ["missing", "not executable", "not ELF"])
def test_python_shim_when_no_usable_build(conf: cfg.ConfigOpts, shim: str,
                                          tmp_path: Path, state: str) -> None:
    binary = tmp_path / "built" / "kuryr-cni"
    if state != "missing":
        binary.parent.mkdir()
        binary.write_bytes(b"#!/bin/sh\n" if state == "not ELF" else b"\x7fELF")
        binary.chmod(0o755 if state == "not ELF" else 0o644)
    assert install.InstallOnFirstReady(conf, shim_source=shim,
                                       compiled=str(binary))(True)
    assert (tmp_path / "bin" / "kuryr-cni").read_text().startswith(
        "#!/usr/bin/env python3\n")


def test_conflists_negotiate_a_version_every_runtime_reads() -> None:
    """libcni < 1.2 (containerd 1.6/1.7, podman 4) ignores cniVersions and
    cannot parse a 1.1.0 result: the top-level version must be 1.0.0."""
    from kuryr_supervisor.cni import protocol
    shipped = Path(__file__).resolve().parents[2] / "etc/cni/net.d/10-kuryr.conflist"
    for data in (json.loads(shipped.read_text()),
                 json.loads(install.default_conflist("kuryr", "unix:///x"))):
        assert data["cniVersion"] == "1.0.0" == protocol.CONFLIST_VERSION
        assert data["cniVersions"] == list(protocol.SUPPORTED_VERSIONS)
        assert data["plugins"][0]["type"] == "kuryr-cni"
