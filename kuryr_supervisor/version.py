"""The version the operator sees, read from the installed package metadata.

setup.cfg's ``version`` is the one place a release number is written; the
daemon (``--version``, ``/status``, ``kuryr_supervisor_build_info``) reads it
back from the distribution's metadata so a hard-coded copy can never drift.
A source tree that was never installed reports ``0+unknown`` rather than
failing.

The same metadata says what an optional part needs (:func:`install_hint`):
a hint names the distributions of an extra, which the package index has,
never ``kuryr-supervisor[extra]``, which it may not (the package is
installed from a checkout).
"""
from __future__ import annotations

import functools
import re
import shlex
import sys
from importlib import metadata

DISTRIBUTION = "kuryr-supervisor"
UNKNOWN = "0+unknown"


@functools.cache
def version() -> str:
    """The installed distribution's version string."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return UNKNOWN


def extra_requirements(extra: str) -> list[str]:
    """The requirements the installed package declares for ``extra``
    (``kubernetes>=29.0``), empty when it was never installed."""
    try:
        declared = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    marker = re.compile(rf"""\bextra\s*==\s*["']{re.escape(extra)}["']""")
    return [spec.strip() for spec, _, condition in
            (req.partition(";") for req in declared) if marker.search(condition)]


def install_hint(extra: str) -> str:
    """The command that installs ``extra``'s requirements into the
    environment this interpreter runs in (the daemon's venv)."""
    wanted = extra_requirements(extra)
    if not wanted:      # a source tree never installed: from the checkout
        return f"pip install '.[{extra}]' from the checkout"
    return f"{sys.executable} -m pip install " + " ".join(map(shlex.quote, wanted))
