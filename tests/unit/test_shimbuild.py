"""The installed Python shim's loader: which path it takes, and that it is
reproducible. The shim's behaviour through both paths, against a real
daemon, is tests/functional/test_shim_installed.py's."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kuryr_supervisor.cni import install, ownership, shimbuild

#: Runs a script as ``__main__`` and prints the audit events that tell the
#: loader's two paths apart: ``marshal.loads`` or a ``compile`` of the shim.
TRACE = f"""
import sys
NAME = {shimbuild.FILENAME!r}
def hook(event, args):
    if event == "marshal.loads" and NAME.encode() in bytes(args[0]) or (
            event == "compile" and args[1] == NAME):
        print("AUDIT", event, file=sys.stderr)
sys.addaudithook(hook)
path = sys.argv[1]
with open(path, "rb") as f:
    code = compile(f.read(), path, "exec")
exec(code, {{"__name__": "__main__", "__file__": path,
            "__builtins__": __builtins__}})
"""


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    path.chmod(0o755)
    return str(path)


def traced(path: str, *flags: str) -> tuple[int, str, list[str]]:
    """(exit status, stdout, audit lines) of a VERSION call."""
    done = subprocess.run(
        [sys.executable, "-I", "-S", *flags, "-c", TRACE, path],
        env={"CNI_COMMAND": "VERSION"}, input="", capture_output=True,
        text=True, timeout=60, check=False)
    audit = [x for x in done.stderr.splitlines() if x.startswith("AUDIT")]
    return done.returncode, done.stdout, audit


def build(tag: str | None = None, magic: bytes | None = None) -> bytes:
    text = Path(install.SHIM_SOURCE).read_text(encoding="utf-8")
    script = shimbuild.loader(text, "#!" + sys.executable, tag=tag,
                              magic=magic)
    return ownership.mark_python_shim(script.encode())


def test_a_matching_python_runs_the_bytecode(tmp_path: Path) -> None:
    status, out, audit = traced(write(tmp_path / "kuryr-cni", build()))
    assert status == 0 and '"supportedVersions"' in out
    assert audit == ["AUDIT marshal.loads"]


def test_any_other_python_compiles_the_source(tmp_path: Path) -> None:
    plain = subprocess.run([sys.executable, "-I", "-S", install.SHIM_SOURCE],
                           env={"CNI_COMMAND": "VERSION"}, input="",
                           capture_output=True, text=True, check=True).stdout
    cases = {"tag": build(tag="cpython-0"), "magic": build(magic=b"\0\0\r\n")}
    for name, data in cases.items():
        path = write(tmp_path / name, data)
        assert traced(path) == (0, plain, ["AUDIT compile"]), name
    # -O: the bytecode was compiled without it, so the source is compiled
    path = write(tmp_path / "optimized", build())
    assert traced(path, "-O") == (0, plain, ["AUDIT compile"])


def test_the_installed_file_is_ours_with_the_marker_under_the_shebang() -> None:
    data = install.shim_script(interpreter="/usr/bin/python3 -IS")
    lines = data.splitlines()
    assert lines[0] == b"#!/usr/bin/python3 -IS"
    assert lines[1].startswith(ownership.PYTHON_SHIM_MARKER)
    assert ownership.shim_is_ours(data)


def test_the_same_bytes_every_time(tmp_path: Path) -> None:
    """A restarted daemon (another hash seed, other modules loaded) builds
    the same file, so an installed shim is left untouched."""
    assert install.shim_script() == install.shim_script()
    code = ("import sys; from kuryr_supervisor.cni import install; "
            "sys.stdout.buffer.write(install.shim_script())")
    outputs = {subprocess.run([sys.executable, "-c", code], capture_output=True,
                              env={**os.environ, "PYTHONHASHSEED": seed},
                              check=True).stdout for seed in ("1", "2")}
    assert outputs == {install.shim_script()}
