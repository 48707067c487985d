"""Versions and the optional parts (the Kubernetes client, keystoneauth1):
what an operator sees of what is installed, and hints that name what the
package index has (the package itself may come from a checkout)."""
from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
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


def test_kubernetes_mode_is_an_extra_without_the_client_library() -> None:
    """Kubernetes mode's transport (urllib3, PyYAML) is the ``kubernetes``
    extra, not a base requirement; the official client library is only the
    tests' (it validates what we write), never the daemon's."""
    requirements = [Requirement(r) for r in
                    metadata.requires("kuryr-supervisor") or []]

    def extras(name: str) -> set[str]:
        return {extra for r in requirements if r.name == name
                for extra in ("", "kubernetes", "test")
                if r.marker is None or r.marker.evaluate({"extra": extra})}
    assert extras("urllib3") == {"kubernetes"}
    assert "kubernetes" in extras("PyYAML") and "" not in extras("PyYAML")
    assert extras("kubernetes") == {"test"}


def run_without_kubernetes(tmp_path: Path, conf_text: str, *args: str,
                           missing: str = "urllib3"
                           ) -> subprocess.CompletedProcess[str]:
    """The daemon (or a subcommand, ``args``) in a Python where ``import
    missing`` fails, as in a venv installed without that extra."""
    conf = tmp_path / "k.conf"
    conf.write_text(conf_text)
    code = (f"import sys; sys.modules[{missing!r}] = None; "
            "from kuryr_supervisor.daemon import main; "
            f"main([*{list(args)!r}, '--config-file', {str(conf)!r}])")
    env = {"PATH": "/usr/bin:/bin"}          # no KUBERNETES_SERVICE_HOST
    return subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=60, env=env)


def installable(line: str) -> list[str]:
    """The requirements the hint in ``line`` installs, checked: a pip
    command of this interpreter (the daemon's environment) naming
    distributions that exist apart from this package, which the package
    index may not have (it is installed from a checkout)."""
    found = re.search(r"(\S+) -m pip install (.+?)(?: \(|$)", line)
    assert found, line
    assert found[1] == sys.executable, line
    wanted = shlex.split(found[2])
    for spec in wanted:
        req = Requirement(spec)
        assert req.name != version.DISTRIBUTION and not req.extras, line
        assert req.specifier.contains(metadata.version(req.name)), spec
    # pip reads it as written (here all is installed: nothing is fetched).
    dry = subprocess.run([found[1], "-m", "pip", "install", "--dry-run",
                          "--no-index", *wanted], capture_output=True,
                         text=True, timeout=120)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    return wanted


@pytest.mark.parametrize("args", [[], ["check-config"]])
def test_kubernetes_mode_without_the_client_exits_78(
        tmp_path: Path, args: list[str]) -> None:
    """Before the daemon takes or binds anything (the privileged port of
    the file is never bound), and check-config alike."""
    proc = run_without_kubernetes(
        tmp_path, "[kubernetes]\napi_root = http://127.0.0.1:1\n"
        "[cni_health_server]\nport = 1\n", *args)
    assert proc.returncode == 78, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Kubernetes mode needs the kubernetes extra's libraries" in lines[0]
    assert installable(lines[0]) == ["urllib3>=2.3", "PyYAML>=6.0"]


def test_the_controller_without_keystoneauth_names_its_install(
        tmp_path: Path) -> None:
    proc = run_without_kubernetes(
        tmp_path, "[DEFAULT]\nrole = controller\n[kubernetes]\n"
        "api_root = http://127.0.0.1:1\n", "check-config",
        missing="keystoneauth1")
    assert proc.returncode == 78, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "role controller needs keystoneauth1" in line
    assert installable(line) == ["keystoneauth1>=5.0"]


#: ``pip install`` of this package with an extra: not on the package index.
NOT_INSTALLABLE = re.compile(r"pip install[^\n`]*kuryr-supervisor\[")


def test_no_hint_installs_this_package_by_name() -> None:
    """The code and the documentation (the changelog is history)."""
    places = [*(ROOT / "kuryr_supervisor").rglob("*.py"), ROOT / "README.rst",
              *(ROOT / "doc" / "source").rglob("*.rst")]
    found = [f"{path.relative_to(ROOT)}: {m[0]}" for path in places
             for m in NOT_INSTALLABLE.finditer(path.read_text())]
    assert found == []


def test_version_without_the_client() -> None:
    code = ("import sys; sys.modules['kubernetes'] = None; "
            "from kuryr_supervisor.daemon import main; main(['--version'])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and declared_version() in proc.stdout + proc.stderr
