"""The import-layer contract (.importlinter) holds, and it can fail.

The same ``lint-imports`` that ``tox -e lint`` runs is run here on the real
tree, then on a copy in which a foundation imports the master: that upward
import must break the contract.
"""
from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = shutil.which("lint-imports", path=os.path.dirname(sys.executable))


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    assert LINT_IMPORTS, "import-linter is a test dependency"
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run([LINT_IMPORTS, "--config", str(tree / ".importlinter"),
                           "--no-cache"], cwd=tree, env=env, text=True,
                          capture_output=True, timeout=120)


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "kuryr_supervisor", tree / "kuryr_supervisor",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tree / ".importlinter")
    return tree


def test_tree_keeps_the_layers(tmp_path: Path) -> None:
    result = _lint(_copy(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("module, upward", [
    ("state/shared.py", "from kuryr_supervisor.master import manager"),
    ("cni/service.py", "from kuryr_supervisor.workers import server"),
    ("health/monitor.py", "from kuryr_supervisor.workers import health"),
    ("cni/api.py", "from kuryr_supervisor.kubernetes import client"),
])
def test_an_upward_import_breaks_the_contract(tmp_path: Path, module: str,
                                              upward: str) -> None:
    tree = _copy(tmp_path)
    path = tree / "kuryr_supervisor" / module
    path.write_text(path.read_text() + f"\n{upward}  # noqa\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout, result.stdout


def test_the_design_lists_the_contracts_layers() -> None:
    """doc/source/design.rst's layer list is .importlinter's, in order."""
    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter")
    contract = parser["importlinter:contract:process-model"]
    layers = [" | ".join(part.strip().removeprefix("kuryr_supervisor.")
                         for part in line.split("|"))
              for line in contract["layers"].strip().splitlines()]
    design = (ROOT / "doc" / "source" / "design.rst").read_text()
    block = re.search(r"other\)::\n\n((?:    .+\n)+)", design)
    assert block, "design.rst: no layer list"
    assert [line.strip() for line in block[1].splitlines()] == layers
