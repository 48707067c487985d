"""The quick start, run as README.rst writes it, in a temporary place.

The command between ``.. quickstart-start`` and ``.. quickstart-end``
(README.rst and doc/source/install/quickstart.rst hold the same one) is run
step by step in bash from a copy of the checkout: ``python3 -m venv``,
``pip install .`` (the package index, and Go when it is on PATH: the build
tier), the link into ``/usr/local/bin``; then the commands the README gives
next, as written, on a PATH of that ``/usr/local/bin`` and the system's
directories. Only places change: ``/opt/kuryr-supervisor`` and
``/usr/local/bin`` are directories of the test's. The apt-get steps are not
run (the test machine has python3-venv from tools/test-packages.txt), nor
the last step, the daemon in the foreground on the machine's default ports
(the functional tests run daemons).
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.tree import ROOT, copy_checkout

pytestmark = [pytest.mark.build, pytest.mark.timeout(900)]

BLOCK = re.compile(r"^\.\. quickstart-start\n(.*?)^\.\. quickstart-end",
                   re.S | re.M)
VENV, LINKS = "/opt/kuryr-supervisor", "/usr/local/bin"
APT = ["apt-get update", "apt-get install -y python3-venv curl"]


def quickstart(page: Path) -> str:
    """The command of ``page``'s quick start block."""
    found = BLOCK.search(page.read_text())
    assert found, f"{page}: no quick start block"
    lines = [line[4:] for line in found.group(1).splitlines()
             if line.startswith("    ")]
    assert len(lines) == 1, lines
    return lines[0]


def test_the_docs_give_the_same_quick_start() -> None:
    assert quickstart(ROOT / "README.rst") == quickstart(
        ROOT / "doc" / "source" / "install" / "quickstart.rst")


def test_the_quick_start_leaves_kuryr_supervisor_runnable(
        tmp_path: Path) -> None:
    steps = quickstart(ROOT / "README.rst").split(" && ")
    # Installed by tools/install-test-deps.sh; the last step is the daemon.
    assert steps[:2] == APT and steps[-1].endswith("kuryr-supervisor"), steps
    venv, links = tmp_path / "venv", tmp_path / "links"
    links.mkdir()
    tree = copy_checkout(tmp_path / "checkout")
    # The README's shell: root's system directories, /usr/local/bin first.
    env = {"PATH": f"{links}:/usr/sbin:/usr/bin:/sbin:/bin",
           "HOME": str(Path.home()), "LANG": "C.UTF-8"}

    def sh(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", command], cwd=tree, env=env,
                              capture_output=True, text=True, timeout=800,
                              check=False)

    for step in steps[2:-1]:
        done = sh(step.replace(VENV, str(venv)).replace(LINKS, str(links)))
        assert done.returncode == 0, (step, done.stderr[-3000:])
    # What the README says next, as written.
    help_ = sh("kuryr-supervisor --help")
    assert help_.returncode == 0, help_.stderr
    assert "subcommands:" in help_.stdout and "check-config" in help_.stdout
    version = sh("kuryr-supervisor --version")
    assert version.returncode == 0 and version.stdout.strip(), version
