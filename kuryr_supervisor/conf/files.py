"""Configuration files: regular files of UTF-8 text, checked before
oslo.config reads them.

oslo.config opens and reads every ``--config-file``, every ``*.conf`` of a
``--config-dir`` and the default files to their end: a FIFO blocks that
read for ever, ``/dev/zero`` never ends, a directory raises a traceback,
and so does a byte that is not UTF-8 (a file saved as Latin-1: a
``UnicodeDecodeError`` from deep in its parser). A path that is not a
regular file (after symlinks) is refused here with one line naming it,
before anything is read; a file that is not UTF-8 text, with one line
naming it and the offset of the first bad byte. :func:`kuryr_supervisor.conf.load`
runs :func:`check` first, so the daemon, ``check-config``, ``status`` and a
reload (SIGHUP) refuse such a file the same way (exit 78 at start).

A UTF-8 byte order mark (what some editors write first) is refused too,
naming it: oslo.config would read it as part of the first line, so
``\\ufeff[DEFAULT]`` is no section header and its options would be lost
or refused with a confusing message. Saving the file without it is the
fix. A path that does not exist is left to oslo.config, which names it.
"""
from __future__ import annotations

import codecs
import os
import stat
from collections.abc import Iterator, Sequence

from oslo_config import cfg

PROJECT = "kuryr-supervisor"
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
_CHUNK = 65536


class Refused(ValueError):
    """A configuration path oslo.config must not read (one line)."""


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


def utf8_problem(path: str) -> str | None:
    """Why the regular file ``path`` is not UTF-8 text without a byte order
    mark (the offset of the first bad byte), or None."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    offset = 0
    try:
        with open(path, "rb") as f:
            while True:
                chunk = f.read(_CHUNK)
                if offset == 0 and chunk.startswith(codecs.BOM_UTF8):
                    return ("starts with a UTF-8 byte order mark (bytes 0-2), "
                            "which oslo.config reads as text: save the file "
                            "without it")
                try:
                    decoder.decode(chunk, final=not chunk)
                except UnicodeDecodeError as exc:
                    # The decoder may hold back the start of a sequence
                    # from the chunk before: exc.start counts from there.
                    bad = offset - len(exc.object) + len(chunk) + exc.start
                    return (f"byte {bad} (0x{exc.object[exc.start]:02x}) is "
                            "not UTF-8: configuration files are UTF-8 text")
                if not chunk:
                    return None
                offset += len(chunk)
    except OSError:
        return None                 # oslo.config says why it cannot read it


def _file(path: str, what: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return                      # oslo.config says it is missing
    if not stat.S_ISREG(mode):
        raise Refused(f"{what} {path} is {_kind(mode)}, not a regular file")
    problem = utf8_problem(path)
    if problem is not None:
        raise Refused(f"{what} {path}: {problem}")


def paths(args: Sequence[str]) -> list[tuple[str, str]]:
    """(what, path) of every file oslo.config would read for ``args``."""
    files = list(_values(args, "--config-file"))
    dirs = list(_values(args, "--config-dir"))
    found: list[tuple[str, str]] = [("--config-file", f) for f in files]
    if not files:
        found += [("default configuration file", f) for f in
                  cfg.find_config_files(project=PROJECT)]
    if not dirs:
        dirs = cfg.find_config_dirs(project=PROJECT)
    for directory in dirs:
        found.append(("--config-dir", directory))
    return found


def check(args: Sequence[str]) -> None:
    """Raise :class:`Refused` for the first configuration path that is not
    a regular file of UTF-8 text (a directory for ``--config-dir``, and
    each ``*.conf`` in it)."""
    for what, path in paths(args):
        if what != "--config-dir":
            _file(path, what)
            continue
        try:
            mode = os.stat(path).st_mode
        except OSError:
            continue
        if not stat.S_ISDIR(mode):
            raise Refused(
                f"--config-dir {path} is {_kind(mode)}, not a directory")
        for name in sorted(os.listdir(path)):
            if name.endswith(".conf"):
                _file(os.path.join(path, name), "--config-dir file")
