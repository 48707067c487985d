#!/usr/bin/env python3
"""Build the release notes (reno) as HTML under the package's version.

reno names a version after the git tag that precedes a note: with no
release tag in the history (a clone of a branch whose tags were never
pushed, as CI's), every note lands under "0.0.0", whatever setup.cfg says.
So when no tag is reachable from HEAD, the notes are built from a
temporary clone of the committed tree whose HEAD is tagged with setup.cfg's
version: they appear under it (0.1.0). Once a release is tagged, the
checkout is built as it is, and notes after the tag appear under reno's
``unreleased_version_title`` (releasenotes/config.yaml).

    tools/build-releasenotes.py [OUTPUT]   (default: releasenotes/build/html)
"""
from __future__ import annotations

import configparser
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def declared_version() -> str:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return parser["metadata"]["version"]


def tagged(tree: Path) -> bool:
    """A release tag is reachable from HEAD (reno then names versions)."""
    done = subprocess.run(["git", "-C", str(tree), "describe", "--tags",
                           "--abbrev=0"], capture_output=True, text=True,
                          check=False)
    return done.returncode == 0


def sphinx(tree: Path, output: Path) -> None:
    """reno reads the repository of the working directory: ``tree``'s."""
    subprocess.run([sys.executable, "-m", "sphinx", "-W", "-b", "html",
                    str(tree / "releasenotes" / "source"), str(output)],
                   check=True, cwd=tree)


def main(argv: list[str]) -> int:
    output = Path(argv[0]).resolve() if argv else \
        ROOT / "releasenotes" / "build" / "html"
    if tagged(ROOT):
        sphinx(ROOT, output)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "--quiet", "--no-hardlinks",
                        str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "tag", declared_version()],
                       check=True)
        sphinx(clone, output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
