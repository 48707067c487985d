"""The version the operator sees, read from the installed package metadata.

setup.cfg's ``version`` is the one place a release number is written; the
daemon (``--version``, ``/status``, ``kuryr_supervisor_build_info``) reads it
back from the distribution's metadata so a hard-coded copy can never drift.
A source tree that was never installed reports ``0+unknown`` rather than
failing.
"""
from __future__ import annotations

import functools
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
