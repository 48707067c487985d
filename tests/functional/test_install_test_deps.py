"""tools/install-test-deps.sh leaves the host as it found it: a package
whose maintainer scripts enable and start a service (as Debian's prometheus,
smartmontools or podman do) is installed with neither done, and the
operator's own enabled units and policy-rc.d are untouched."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(shutil.which("dpkg-deb") is None
                       or shutil.which("apt-get") is None,
                       reason="needs Debian's dpkg-deb and apt-get"),
]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "install-test-deps.sh"
POLICY = Path("/usr/sbin/policy-rc.d")
UNITS = Path("/etc/systemd/system")

POSTINST = """#!/bin/sh
set -e
# As dh_installsystemd's snippet: enable, then start through invoke-rc.d's
# policy (deb-systemd-invoke asks policy-rc.d the same way).
deb-systemd-helper enable {unit}.service >/dev/null || true
deb-systemd-helper --user enable {unit}.service >/dev/null || true
update-rc.d {unit} defaults >/dev/null || true
mkdir -p {out}
cat /usr/sbin/policy-rc.d > {out}/policy-during 2>/dev/null || true
rc=0; /usr/sbin/policy-rc.d {unit}.service start || rc=$?
echo $rc > {out}/policy-answer
"""
POSTRM = """#!/bin/sh
set -e
if [ "$1" = purge ]; then
    update-rc.d {unit} remove >/dev/null || true
    deb-systemd-helper purge {unit}.service >/dev/null || true
    deb-systemd-helper --user purge {unit}.service >/dev/null || true
fi
"""


def _deb(tmp: Path, name: str, unit: str, out: Path) -> Path:
    root = tmp / name
    (root / "DEBIAN").mkdir(parents=True)
    (root / "lib/systemd/system").mkdir(parents=True)
    (root / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: kuryr-supervisor tests <t@invalid>\n"
        f"Description: install-test-deps test package\n")
    post = root / "DEBIAN/postinst"
    post.write_text(POSTINST.format(unit=unit, out=out))
    post.chmod(0o755)
    postrm = root / "DEBIAN/postrm"
    postrm.write_text(POSTRM.format(unit=unit))
    postrm.chmod(0o755)
    service = ("[Unit]\nDescription=test\n[Service]\nExecStart=/bin/true\n"
               "[Install]\nWantedBy=multi-user.target default.target\n")
    (root / f"lib/systemd/system/{unit}.service").write_text(service)
    (root / "usr/lib/systemd/user").mkdir(parents=True)
    (root / f"usr/lib/systemd/user/{unit}.service").write_text(service)
    (root / "etc/init.d").mkdir(parents=True)
    init = root / f"etc/init.d/{unit}"
    init.write_text(f"#!/bin/sh\n### BEGIN INIT INFO\n# Provides: {unit}\n"
                    "# Required-Start:\n# Required-Stop:\n"
                    "# Default-Start: 2 3 4 5\n# Default-Stop: 0 1 6\n"
                    "# Short-Description: test\n### END INIT INFO\nexit 0\n")
    init.chmod(0o755)
    deb = tmp / f"{name}.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root),
                    str(deb)], check=True, capture_output=True)
    return deb


def enabled(unit: str) -> list[Path]:
    """Every link that enables ``unit``, systemd's and System V's, dangling
    ones too (pathlib's glob skips those)."""
    found = []
    for top in (UNITS, Path("/etc/systemd/user"), *Path("/etc").glob("rc?.d")):
        for where, _, names in os.walk(top):
            found += [Path(where, name) for name in names
                      if name in (f"{unit}.service", f"S01{unit}",
                                  f"K01{unit}")]
    return [p for p in found if p.is_symlink()]


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def test_installs_without_enabling_or_starting(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    name, unit = f"ks-itd-{tag}", f"ks-itd-{tag}"
    out = tmp_path / "out"
    deb = _deb(tmp_path, name, unit, out)
    listing = tmp_path / "packages.txt"
    listing.write_text(f"# a comment\n\n{deb}   # trailing comment\n")
    # A unit the operator enabled before: it must stay enabled.
    mine = UNITS / "multi-user.target.wants" / f"ks-itd-mine-{tag}.service"
    mine.parent.mkdir(parents=True, exist_ok=True)
    os.symlink("/dev/null", mine)
    policy_before = _digest(POLICY)
    try:
        done = subprocess.run([str(SCRIPT), str(listing)], capture_output=True,
                              text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        status = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name],
                                capture_output=True, text=True, check=False)
        assert status.stdout == "install ok installed"
        # The postinst ran under the script's policy, which forbade starts.
        assert "install-test-deps" in (out / "policy-during").read_text()
        assert (out / "policy-answer").read_text().strip() == "101"
        # What the postinst enabled is disabled again (systemd, system and
        # user wide, and System V runlevels); the operator's own link and
        # policy-rc.d are as they were.
        assert not enabled(unit), enabled(unit)
        assert mine.is_symlink()
        assert _digest(POLICY) == policy_before
    finally:
        mine.unlink(missing_ok=True)
        subprocess.run(["dpkg", "--purge", name], capture_output=True,
                       check=False)
        for link in enabled(unit):
            link.unlink()


def test_refuses_an_empty_list(tmp_path: Path) -> None:
    listing = tmp_path / "packages.txt"
    listing.write_text("# nothing\n\n")
    policy_before = _digest(POLICY)
    done = subprocess.run([str(SCRIPT), str(listing)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "no package" in done.stderr
    assert _digest(POLICY) == policy_before


def test_the_list_names_the_suites_packages() -> None:
    """The README's test command installs from this one file."""
    names = [line.split("#")[0].strip() for line in
             (ROOT / "tools/test-packages.txt").read_text().splitlines()]
    names = [n for n in names if n]
    for needed in ("mariadb-server", "containerd", "prometheus", "podman"):
        assert needed in names
    readme = (ROOT / "README.rst").read_text()
    assert "tools/install-test-deps.sh" in readme
    script = SCRIPT.read_text()
    assert "apt-get install -y --no-install-recommends" in script
