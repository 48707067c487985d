"""The controller is composed at construction, never wired afterwards.

Each handler is built by one function once its clients exist, every
collaborator passed to a constructor (:mod:`kuryr_supervisor.controller.
runtime`). Two shapes would say otherwise, and this scan of every module
of ``kuryr_supervisor/controller`` and of the network judge's room
(``kuryr_supervisor/netcheck/judge``, a room of the controller's) finds
them:

- ``assert self.x is not None``: a collaborator that a constructor could
  have guaranteed, missing until something sets it;
- ``x.attr = ...`` (a plain assignment, ``x`` not ``self`` nor ``cls``):
  an attribute of another object set from outside after it was built
  (``self.report.client = ...``, ``maker.on_change = ...``). An augmented
  assignment (``pool.hits += 1``) is an update of a value's own state, not
  wiring, and is not counted.

:data:`ALLOWED` names what truly must stay, each with why.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTROLLER = ROOT / "kuryr_supervisor" / "controller"
#: The network judge's room: a room of the controller outside its package.
JUDGE = ROOT / "kuryr_supervisor" / "netcheck" / "judge"

#: (module under controller/, the assigned target as written) -> why it
#: stays.
ALLOWED: dict[tuple[str, str], str] = {
    ("openstack/sendfence.py", "self.poolmanager.pool_classes_by_scheme"):
        "urllib3's PoolManager takes its connection pool classes only as "
        "this attribute (no constructor argument); the adapter sets it on "
        "the pool manager its own init_poolmanager has just built",
}


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found: list[ast.expr] = []
        for target in node.targets:
            found += target.elts if isinstance(target, (ast.Tuple, ast.List)) \
                else [target]
        return found
    if isinstance(node, ast.AnnAssign):
        return [node.target]
    return []


def wired(tree: ast.AST) -> list[tuple[int, str]]:
    """Attributes of another object set by plain assignment."""
    return [(node.lineno, ast.unparse(target))
            for node in ast.walk(tree) for target in _targets(node)
            if isinstance(target, ast.Attribute) and not _is_self(target.value)]


def _none_checked(test: ast.expr) -> list[ast.expr]:
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [e for value in test.values for e in _none_checked(value)]
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and \
            isinstance(test.ops[0], ast.IsNot) and \
            isinstance(test.comparators[0], ast.Constant) and \
            test.comparators[0].value is None:
        return [test.left]
    return []


def guarded(tree: ast.AST) -> list[tuple[int, str]]:
    """``assert self.x is not None`` (alone or among ``and``-ed checks)."""
    return [(node.lineno, f"assert {ast.unparse(checked)} is not None")
            for node in ast.walk(tree) if isinstance(node, ast.Assert)
            for checked in _none_checked(node.test)
            if isinstance(checked, ast.Attribute) and _is_self(checked.value)]


def findings(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(), str(path))
        for line, what in wired(tree) + guarded(tree):
            if (rel, what) not in ALLOWED:
                out.append(f"{rel}:{line}: {what}")
    return out


@pytest.mark.parametrize("root", [CONTROLLER, JUDGE], ids=["controller", "judge"])
def test_no_collaborator_is_wired_or_guarded_after_construction(root: Path) -> None:
    assert list(root.rglob("*.py"))
    assert findings(root) == []


def test_every_allowance_is_still_needed() -> None:
    """An allowance whose line went away goes too."""
    seen = set()
    for rel, _ in ALLOWED:
        tree = ast.parse((CONTROLLER / rel).read_text())
        seen |= {(rel, what) for _, what in wired(tree) + guarded(tree)}
    assert set(ALLOWED) <= seen


@pytest.mark.parametrize("source, found", [
    ("class H:\n    def run(self):\n        self.report.client = self.client\n",
     "self.report.client"),
    ("def build(cloud):\n    maker = Maker(cloud)\n    maker.on_change = f\n",
     "maker.on_change"),
    ("def build(a, b):\n    a.x, b.y = 1, 2\n", "a.x"),
    ("class H:\n    def tick(self):\n        assert self.known is not None\n",
     "assert self.known is not None"),
    ("class H:\n    def tick(self):\n"
     "        assert self.a is not None and self.b is not None\n",
     "assert self.b is not None"),
])
def test_the_scan_finds_each_shape(tmp_path: Path, source: str,
                                   found: str) -> None:
    (tmp_path / "mod.py").write_text(source)
    assert any(f.endswith(found) for f in findings(tmp_path)), \
        findings(tmp_path)


@pytest.mark.parametrize("source", [
    "class H:\n    def __init__(self, c):\n        self.c = c\n",
    "def count(pool):\n    pool.hits += 1\n",
    "def f(x):\n    assert x is not None\n",
    "def f(d):\n    d.items[0] = 1\n",
])
def test_the_scan_leaves_the_rest(tmp_path: Path, source: str) -> None:
    (tmp_path / "mod.py").write_text(source)
    assert findings(tmp_path) == []
