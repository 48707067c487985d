"""No module of the package imports another module's private names.

Run by ``tox -e lint`` beside ruff, whose SLF001 finds ``obj._name`` and
``module._name`` reached from outside (anything but ``self``, ``cls`` and
``super()``); what it does not see is an import of a private name, which
this finds:

- ``from x import _name`` (any module, ours or a library's): what a module
  keeps private is no one else's to use; it makes the name public, or
  gives a public function for what the importer needs;
- ``import x._name`` or ``from x._name import y``: a private module.

And what neither sees: a private attribute reached through a string,
``getattr(obj, "_name")`` (``hasattr``, ``setattr``, ``delattr`` too) on
anything but ``self`` or ``cls`` -- SLF001 with the name hidden from it.
What truly has no public way is reached as ``obj._name`` in one function,
with ``# noqa: SLF001`` and the reason, where the linter sees it.

Standard-library modules whose own name starts with an underscore
(``_socket``, a C extension) are imported by name, as Python documents
them, and are left alone. Exits 1, one line per finding
(``path:line: what``).
"""
from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOTS = ["kuryr_supervisor"]


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__")
                                          and name.endswith("__"))


#: The builtins that take an attribute's name as a string.
BY_NAME = {"getattr", "hasattr", "setattr", "delattr"}


def _by_name(node: ast.Call) -> str | None:
    """``getattr(..., '_name')`` when ``node`` reaches a private name
    through a string on another object, else None."""
    if not (isinstance(node.func, ast.Name) and node.func.id in BY_NAME
            and len(node.args) >= 2):
        return None
    owner, name = node.args[0], node.args[1]
    if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
        return None
    if isinstance(name, ast.Constant) and isinstance(name.value, str) \
            and private(name.value):
        return f"{node.func.id}(..., {name.value!r})"
    return None


def findings(path: Path) -> Iterator[str]:
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (call := _by_name(node)):
            yield (f"{path}:{node.lineno}: {call}: a private attribute "
                   "through a string")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            parts = module.split(".")
            if any(private(p) for p in parts[1:]):
                yield f"{path}:{node.lineno}: from {module} import: a private module"
            for alias in node.names:
                if private(alias.name):
                    yield (f"{path}:{node.lineno}: from {module or '.'} import "
                           f"{alias.name}: a private name")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if any(private(p) for p in alias.name.split(".")[1:]):
                    yield f"{path}:{node.lineno}: import {alias.name}: a private module"


def main(roots: list[str]) -> int:
    found = [line for root in roots for path in sorted(Path(root).rglob("*.py"))
             for line in findings(path)]
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ROOTS))
