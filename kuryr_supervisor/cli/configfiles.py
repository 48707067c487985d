"""Configuration paths are regular files, checked before oslo.config reads
them.

oslo.config opens and reads every ``--config-file``, every ``*.conf`` of a
``--config-dir`` and the default files to their end: a FIFO blocks that
read for ever, ``/dev/zero`` never ends, a directory raises a traceback.
A path that is not a regular file (after symlinks) is refused here with one
line naming it, before anything is read: the daemon and ``check-config``
then exit 78 instead of hanging. A path that does not exist is left to
oslo.config, which names it.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence

from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _values(args: Sequence[str], flag: str) -> Iterator[str]:
    for i, arg in enumerate(args):
        if arg == "--":
            return
        if arg == flag and i + 1 < len(args):
            yield args[i + 1]
        elif arg.startswith(flag + "="):
            yield arg[len(flag) + 1:]


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _regular(path: str, what: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return                      # oslo.config says it is missing
    if not stat.S_ISREG(mode):
        raise conf_mod.ConfigError(
            f"{what} {path} is {_kind(mode)}, not a regular file")


def paths(args: Sequence[str]) -> list[tuple[str, str]]:
    """(what, path) of every file oslo.config would read for ``args``."""
    files = list(_values(args, "--config-file"))
    dirs = list(_values(args, "--config-dir"))
    found: list[tuple[str, str]] = [("--config-file", f) for f in files]
    if not files:
        found += [("default configuration file", f) for f in
                  cfg.find_config_files(project=conf_mod.PROJECT)]
    if not dirs:
        dirs = cfg.find_config_dirs(project=conf_mod.PROJECT)
    for directory in dirs:
        found.append(("--config-dir", directory))
    return found


def check(args: Sequence[str]) -> None:
    """Raise :class:`~kuryr_supervisor.conf.ConfigError` for the first
    configuration path that is not a regular file (a directory for
    ``--config-dir``, and each ``*.conf`` in it)."""
    for what, path in paths(args):
        if what != "--config-dir":
            _regular(path, what)
            continue
        try:
            mode = os.stat(path).st_mode
        except OSError:
            continue
        if not stat.S_ISDIR(mode):
            raise conf_mod.ConfigError(
                f"--config-dir {path} is {_kind(mode)}, not a directory")
        for name in sorted(os.listdir(path)):
            if name.endswith(".conf"):
                _regular(os.path.join(path, name), "--config-dir file")
