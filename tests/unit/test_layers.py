"""The import contracts (.importlinter) hold, and each can fail; so does
the check that no module imports another's private names (nor reads them
through a string).

The same ``lint-imports`` that ``tox -e lint`` runs is run here on the real
tree, then on copies in which one import goes upward (a foundation imports
the master; the OpenStack adapter imports the port handler), sideways
between independent rooms (leadership and the OpenStack adapter), closes
a cycle (inside a package with no layers), reaches the controller from
health, or crosses between the two sides of network health: each must
break a contract.
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
    # the controller's rooms
    ("controller/openstack/wire.py", "from kuryr_supervisor.controller.ports import book"),
    ("controller/pools/records.py", "from kuryr_supervisor.controller.ports import book"),
    ("controller/handlers.py", "from kuryr_supervisor.controller.pools import nodes"),
    ("controller/leadership/announcer.py",
     "from kuryr_supervisor.controller.openstack import wire"),
    # cycles: modules of one package, and packages of one package
    ("controller/pools/portpools.py", "from kuryr_supervisor.controller.pools import refill"),
    ("health/checks/base.py", "from kuryr_supervisor.health.checks import controller"),
    ("cni/ipam/__init__.py", "from kuryr_supervisor.cni import service"),
    # health never imports the controller (its checks that need the
    # adapters are built where the roles are assembled)
    ("health/checks/controller.py",
     "from kuryr_supervisor.controller.openstack import adapter"),
    # a handler reaches past the runtime, the generic client and the
    # OpenStack adapter: the CNI side, the node's own Kubernetes modules,
    # the transport underneath the client
    ("controller/ports/handler.py", "from kuryr_supervisor.cni import api"),
    ("netcheck/judge/canary.py",
     "from kuryr_supervisor.kubernetes import registry"),
    ("controller/ports/owned.py",
     "from kuryr_supervisor.kubernetes import transport"),
    ("controller/runtime.py", "from kuryr_supervisor.controller import handlers"),
    # network health: the node's side above health, never the controller;
    # the judge a room of the controller's, beside the other rooms; the
    # two sides never import each other, the codecs neither
    ("health/monitor.py", "from kuryr_supervisor.netcheck.node import netwatch"),
    ("netcheck/node/netwatch.py", "from kuryr_supervisor.controller import runtime"),
    ("netcheck/node/clusterview.py",
     "from kuryr_supervisor.netcheck.judge import judge"),
    ("netcheck/judge/report.py", "from kuryr_supervisor.netcheck.node import dataplane"),
    ("netcheck/judge/handler.py", "from kuryr_supervisor.health import monitor"),
    ("netcheck/judge/judge.py", "from kuryr_supervisor.controller.ports import book"),
    ("controller/ports/book.py", "from kuryr_supervisor.netcheck.judge import judge"),
    ("netcheck/codecs/record.py", "from kuryr_supervisor.netcheck.node import dataplane"),
    ("kubernetes/resource.py", "from kuryr_supervisor.netcheck.codecs import record"),
    # a subcommand's module and the package that dispatches to it
    ("cli/status.py", "from kuryr_supervisor import cli"),
    ("cli/checks.py", "import kuryr_supervisor.cli"),
])
def test_an_upward_import_breaks_the_contract(tmp_path: Path, module: str,
                                              upward: str) -> None:
    tree = _copy(tmp_path)
    path = tree / "kuryr_supervisor" / module
    path.write_text(path.read_text() + f"\n{upward}  # noqa\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout, result.stdout


NEW_HANDLER = """\
from kuryr_supervisor.controller.openstack import adapter
from kuryr_supervisor.controller.runtime import Runtime
from kuryr_supervisor.kubernetes import informer, listing, resource
"""


@pytest.mark.parametrize("extra, kept", [
    ("", True),
    ("from kuryr_supervisor.kubernetes import registry\n", False),
    ("from kuryr_supervisor.health import monitor\n", False),
    ("from kuryr_supervisor.controller.ports import book\n", False),
])
def test_a_new_handler_package_falls_under_the_contracts(
        tmp_path: Path, extra: str, kept: bool) -> None:
    """A handler still to come (controller/services/) may use the runtime,
    the generic client and informer and the OpenStack adapter; past those,
    or into another handler's room, it breaks a contract."""
    tree = _copy(tmp_path)
    package = tree / "kuryr_supervisor" / "controller" / "services"
    shutil.rmtree(package, ignore_errors=True)       # one being written
    package.mkdir()
    (package / "__init__.py").write_text('"""Services."""\n')
    (package / "handler.py").write_text(NEW_HANDLER + extra)
    result = _lint(tree)
    assert (result.returncode == 0) == kept, result.stdout
    if not kept:
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


CHECK_PRIVATE = ROOT / "tools" / "check-private-imports.py"


@pytest.mark.parametrize("line", [
    "from kuryr_supervisor.controller.openstack.wire import _decode_port",
    "from kuryr_supervisor.controller.openstack._hidden import x",
    "import kuryr_supervisor.controller._hidden",
    'x = getattr(cfg.CONF, "_opts", {})',
    'x = hasattr(object(), "_groups")',
])
def test_a_private_import_is_found(tmp_path: Path, line: str) -> None:
    tree = _copy(tmp_path)
    clean = subprocess.run([sys.executable, str(CHECK_PRIVATE)], cwd=tree,
                           text=True, capture_output=True, timeout=60)
    assert clean.returncode == 0, clean.stdout
    path = tree / "kuryr_supervisor" / "controller" / "pools" / "records.py"
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    found = subprocess.run([sys.executable, str(CHECK_PRIVATE)], cwd=tree,
                           text=True, capture_output=True, timeout=60)
    assert found.returncode == 1
    assert "controller/pools/records.py" in found.stdout, found.stdout
