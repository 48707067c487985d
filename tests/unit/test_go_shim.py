"""The Go shim's own checks run in the suite: gofmt, go vet, go test.

``go test`` holds the table-driven tests of its logic (local answers,
forwarding, daemon answers, the SO_PEERCRED refusal, time-outs); the
conformance tests exec the built binary (``test_shim_conformance.py``).
"""
from __future__ import annotations

import subprocess

import pytest

from tests.fixtures.clients import REPO, _run, go_env

pytestmark = pytest.mark.build
SHIM_DIR = REPO / "cmd" / "kuryr-cni"


def test_gofmt_vet_and_go_test() -> None:
    env = go_env(GO111MODULE="on")
    unformatted = _run(["gofmt", "-l", "."], SHIM_DIR, env)
    assert unformatted == "", f"gofmt would rewrite: {unformatted}"
    _run(["go", "vet", "./..."], SHIM_DIR, env)
    out = _run(["go", "test", "-count=1", "-v", "./..."], SHIM_DIR, env)
    passed = [line for line in out.splitlines() if line.startswith("--- PASS")]
    assert "FAIL" not in out and len(passed) >= 5, out


def test_the_binary_is_static(go_shim: object) -> None:
    done = subprocess.run(["file", "-b", str(go_shim)], capture_output=True,
                          text=True, check=False)
    if done.returncode == 0 and done.stdout:
        assert "statically linked" in done.stdout, done.stdout
    with open(str(go_shim), "rb") as f:
        head = f.read(4096)
    assert head.startswith(b"\x7fELF") and b"/lib64/ld-linux" not in head
