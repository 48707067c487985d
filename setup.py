"""Build hook: the compiled kuryr-cni shim goes into the wheel when Go can build it.

Everything else is declared in setup.cfg. When ``go`` 1.19 or newer is on
PATH, building the wheel (``pip install .``, ``pip wheel .``) runs
``cmd/kuryr-cni/build.sh`` into the build tree: static, standard library
only, offline (``GOPROXY=off``; go.mod has no requirements), so the package
carries ``kuryr_supervisor/cni/bin/kuryr-cni`` and the installer puts the
compiled shim on the host. Without Go (or if the build fails) the wheel
carries only the Python shim and one line says how to get the compiled one.
A wheel with the binary is tagged for this platform (``py3-none-linux_*``),
one without stays ``py3-none-any``.

Editable installs (``pip install -e``, tox's ``usedevelop``) build nothing:
they use the source tree, where ``tox -e shim`` puts the binary.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import Any

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1: the wheel package's, if any
    try:
        from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]
    except ImportError:
        bdist_wheel = None  # type: ignore[assignment,misc]

HERE = os.path.dirname(os.path.abspath(__file__))
SHIM = os.path.join("kuryr_supervisor", "cni", "bin", "kuryr-cni")
MIN_GO = (1, 19)
HINT = ("kuryr-supervisor: {why}: this install carries the Python CNI shim; "
        "for the compiled one install Go >= 1.19 (Debian: golang-go) and "
        "reinstall, or run cmd/kuryr-cni/build.sh")


def go_version(go: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([go, "env", "GOVERSION"], capture_output=True,
                             text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.match(r"go(\d+)\.(\d+)", out.strip())
    return (int(found[1]), int(found[2])) if found else None


def build_shim(output: str) -> str | None:
    """Build the shim at ``output``; None on success, else why not."""
    go = shutil.which("go")
    if go is None:
        return "no Go on PATH"
    found = go_version(go)
    if found is None or found < MIN_GO:
        return f"Go on PATH is older than {MIN_GO[0]}.{MIN_GO[1]}"
    script = os.path.join(HERE, "cmd", "kuryr-cni", "build.sh")
    done = subprocess.run(["sh", script, output], capture_output=True,
                          text=True, timeout=600, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["failed"])[-1]
        return f"building the compiled shim failed ({last})"
    return None


class BuildPyWithShim(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        output = os.path.join(os.path.abspath(self.build_lib), SHIM)
        why = build_shim(output)
        if why is None:
            print(f"kuryr-supervisor: built the compiled CNI shim {SHIM}")
        elif not os.path.exists(os.path.join(HERE, SHIM)):
            # Not one `tox -e shim` left in the tree (build_py copied that):
            # no binary from an earlier build of this tree either.
            if os.path.exists(output):
                os.unlink(output)
            print(HINT.format(why=why), file=sys.stderr)


COMMANDS: dict[str, Any] = {"build_py": BuildPyWithShim}

if bdist_wheel is not None:
    class BdistWheelTagged(bdist_wheel):  # type: ignore[misc,valid-type]
        """``py3-none-<platform>`` when the wheel carries the binary."""

        def get_tag(self) -> Any:
            build_lib = self.get_finalized_command("build_py").build_lib
            if os.path.exists(os.path.join(build_lib, SHIM)):
                self.root_is_pure = False
                _, _, plat = super().get_tag()
                return "py3", "none", plat
            return super().get_tag()

    COMMANDS["bdist_wheel"] = BdistWheelTagged

setup(cmdclass=COMMANDS)
