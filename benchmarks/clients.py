"""Builds of the compiled shim and of cnitool, shared with the test suite.

- the Go shim through its own ``cmd/kuryr-cni/build.sh`` (static, offline);
- cnitool, a runtime-side driver over libcni (``tests/clients/cnitool/main.go``),
  in GOPATH mode against Debian's libcni (``golang-github-appc-cni-dev`` in
  ``/usr/share/gocode``), offline. libcni 1.1 is what containerd 1.6/1.7 and
  podman 4 vendor, so it invokes plugins, negotiates versions and parses
  results exactly as those runtimes do.

Go's build cache is ``build/gocache`` in the checkout (ignored by git), so
later builds reuse the compiled standard library. Failures raise
:class:`BuildError` with go's output.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOCODE = "/usr/share/gocode"
LIBCNI = Path(GOCODE, "src/github.com/containernetworking/cni/libcni")


class BuildError(RuntimeError):
    """Go or libcni is missing, or a build failed."""


def go_env(**extra: str) -> dict[str, str]:
    """An environment for ``go`` that never reaches the network."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "HOME": os.environ.get("HOME", "/root"),
           "GOCACHE": str(REPO / "build" / "gocache"),
           "GOPATH": str(REPO / "build" / "gopath"),
           "GOPROXY": "off", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    env.update(extra)
    return env


def run_go(argv: list[str], cwd: Path | str, env: dict[str, str]) -> str:
    """Run a Go tool; its stdout, or BuildError with everything it said."""
    if shutil.which("go", path=env["PATH"]) is None:
        raise BuildError("go is not installed (Debian: apt-get install golang-go)")
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    if done.returncode != 0:
        raise BuildError(f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def build_go_shim(output: Path) -> Path:
    """The compiled kuryr-cni at ``output``."""
    run_go([str(REPO / "cmd" / "kuryr-cni" / "build.sh"), str(output)], REPO, go_env())
    return output


def build_cnitool(workdir: Path) -> Path:
    """``workdir/cnitool``, built with GOPATH=<workdir>:/usr/share/gocode."""
    if not LIBCNI.is_dir():
        raise BuildError("libcni is not installed (Debian: golang-github-appc-cni-dev)")
    src = workdir / "src" / "cnitool"
    src.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "tests" / "clients" / "cnitool" / "main.go", src / "main.go")
    output = workdir / "cnitool"
    run_go(["go", "build", "-o", str(output), "."], src,
           go_env(GO111MODULE="off", GOPATH=f"{workdir}{os.pathsep}{GOCODE}", GOFLAGS=""))
    return output
