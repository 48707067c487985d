"""Which kuryr-cni shim is installed: compiled (Go) or Python, and whose.

The shim is a file on this host (``[cni_install] bin_dir``), not part of the
daemon's state, so ``status`` looks at it here rather than asking the probe
listener (a probe request does no I/O). Neither shim carries a version
string; a shim byte-identical to the one this package installs is this
package's version, any other is named by a digest so two nodes can be
compared.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os

from oslo_config import cfg

from kuryr_supervisor import version
from kuryr_supervisor.cni import install

COMPILED = "compiled (Go)"
PYTHON = "Python"
ABSENT = "not installed"
#: How to get the compiled shim (setup.py prints the same advice).
HINT = ("for the compiled one: install Go >= 1.19, e.g. Debian's golang-go, "
        "and reinstall, or run cmd/kuryr-cni/build.sh")


@dataclasses.dataclass(frozen=True)
class ShimInfo:
    path: str
    kind: str             # COMPILED, PYTHON, ABSENT or "unknown"
    version: str | None   # this package's version when it is our build
    digest: str = ""      # sha256 prefix of the installed file

    def describe(self) -> str:
        if self.kind == ABSENT:
            return f"{ABSENT} ({self.path})"
        owner = self.version or f"another build, sha256 {self.digest}"
        return f"{self.kind} {owner} ({self.path})"


def packaged_kind(compiled: str | None = install.COMPILED_SHIM) -> str:
    """What this installation carries: the compiled shim when the wheel was
    built with Go, else only the Python fallback."""
    return COMPILED if install.compiled_shim(compiled) is not None else PYTHON


def inspect(path: str, *, interpreter: str = install.DEFAULT_INTERPRETER,
            compiled: str | None = install.COMPILED_SHIM,
            source: str = install.SHIM_SOURCE) -> ShimInfo:
    """Kind and origin of the file at ``path``."""
    try:
        with open(path, "rb") as f:
            data = f.read(64 * 1024 * 1024)
    except FileNotFoundError:
        return ShimInfo(path, ABSENT, None)
    except OSError as exc:
        return ShimInfo(path, f"unreadable: {exc.strerror}", None)
    digest = hashlib.sha256(data).hexdigest()[:12]
    if data.startswith(b"\x7fELF"):
        ours = install.compiled_shim(compiled) == data
        kind = COMPILED
    elif data.startswith(b"#!"):
        try:
            ours = install.shim_script(source, interpreter) == data
        except OSError:
            ours = False
        kind = PYTHON
    else:
        return ShimInfo(path, "unknown", None, digest)
    return ShimInfo(path, kind, version.version() if ours else None, digest)


def installed(conf: cfg.ConfigOpts) -> ShimInfo:
    """The shim in ``[cni_install] bin_dir``."""
    opts = conf.cni_install
    return inspect(os.path.join(opts.bin_dir, install.SHIM_NAME),
                   interpreter=opts.shim_interpreter)
