"""Versions and the optional Kubernetes client: what an operator sees of
what is installed."""
from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from kuryr_supervisor import version

ROOT = Path(__file__).resolve().parents[2]


def declared_version() -> str:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return parser["metadata"]["version"]


def test_version_comes_from_package_metadata() -> None:
    assert version.version() == metadata.version("kuryr-supervisor")
    assert version.version() == declared_version()


def test_version_option_prints_it_and_exits_zero() -> None:
    daemon = shutil.which("kuryr-supervisor")
    assert daemon, "kuryr-supervisor is not installed"
    done = subprocess.run([daemon, "--version"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (done.stdout + done.stderr).strip() == declared_version()


def test_changelog_names_the_current_version() -> None:
    lines = (ROOT / "CHANGELOG.rst").read_text().splitlines()
    headings = [lines[i] for i in range(1, len(lines) - 1)
                if lines[i] and set(lines[i + 1]) == {"="}
                and set(lines[i - 1]) != {"="}]
    assert headings[0].split()[0] == declared_version(), headings


def test_kubernetes_client_is_an_extra() -> None:
    requirements = [Requirement(r) for r in
                    metadata.requires("kuryr-supervisor") or []]
    k8s = [r for r in requirements if r.name == "kubernetes"]
    assert k8s, "kubernetes is not declared at all"
    for req in k8s:
        assert req.marker is not None
        assert not req.marker.evaluate({"extra": ""}), \
            "kubernetes must not be a base requirement"
    assert any(r.marker and r.marker.evaluate({"extra": "kubernetes"})
               for r in k8s)


def run_without_kubernetes(tmp_path: Path, conf_text: str
                           ) -> subprocess.CompletedProcess[str]:
    """The daemon in a Python where ``import kubernetes`` fails, as in a
    venv installed without the extra."""
    conf = tmp_path / "k.conf"
    conf.write_text(conf_text)
    code = ("import sys; sys.modules['kubernetes'] = None; "
            "from kuryr_supervisor.daemon import main; "
            f"main(['--config-file', {str(conf)!r}])")
    env = {"PATH": "/usr/bin:/bin"}          # no KUBERNETES_SERVICE_HOST
    return subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=60, env=env)


def test_kubernetes_mode_without_the_client_exits_78(tmp_path: Path) -> None:
    proc = run_without_kubernetes(
        tmp_path, "[kubernetes]\napi_root = http://127.0.0.1:1\n"
        "[cni_health_server]\nport = 1\n")
    assert proc.returncode == 78, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "pip install 'kuryr-supervisor[kubernetes]'" in lines[0]


def test_version_without_the_client() -> None:
    code = ("import sys; sys.modules['kubernetes'] = None; "
            "from kuryr_supervisor.daemon import main; main(['--version'])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and declared_version() in proc.stdout + proc.stderr
