"""Which files on the host the installer wrote: the marker in each of them.

The installer writes ``<bin_dir>/kuryr-cni`` and ``<conf_dir>/<conflist>``,
two paths another CNI may use too (upstream Kuryr's shim is also named
``kuryr-cni`` and its conflist ``10-kuryr.conflist``). It overwrites or
removes a file only when the file carries our marker:

- the conflist: a top-level ``"kuryrSupervisor"`` object naming us
  (``{"installedBy": "kuryr-supervisor", "version": ...}``). libcni reads a
  conflist into a struct and ignores keys it does not know, so runtimes and
  ``cnitool`` are indifferent to it;
- the compiled shim: the Go build information the toolchain embeds in every
  binary (``path\\tkuryr-supervisor/cmd/kuryr-cni``, what ``go version -m``
  prints), so no source change can drop it;
- the Python shim: the comment line the installer puts under the shebang.

Why the file's bytes and not ``kuryr-cni --version``: the file in question
is by definition one we may not have written, and running an unknown binary
as root to ask it who it is runs whatever it does (upstream Kuryr's shim
reads ``CNI_COMMAND`` and talks to its own daemon; another could do
anything). Reading bytes runs nothing. The marker tells our files from
another CNI's; it is no defence against root, who can write anything there.

Files written before markers existed are recognised by shape, so an upgrade
does not turn a node's own files into foreign ones: the Python shim by its
docstring's first line, the generated conflist by its ``cniVersions`` key
and its only plugin, ours with no options but ``daemon_socket``.
"""
from __future__ import annotations

import errno
import json
import os
import stat
from typing import Any

from kuryr_supervisor import version

INSTALLED_BY = "kuryr-supervisor"
CONFLIST_KEY = "kuryrSupervisor"
SHIM_NAME = "kuryr-cni"
#: The Go toolchain's build information of our module (``go version -m``).
GO_SHIM_MARKER = b"path\tkuryr-supervisor/cmd/kuryr-cni\n"
#: The line the installer writes under the Python shim's shebang.
PYTHON_SHIM_MARKER = b"# kuryr-supervisor-cni-shim: installed by kuryr-supervisor"
_LEGACY_PYTHON_SHIM = (b'"""kuryr-cni: the CNI plugin executable, a thin '
                       b"client of kuryr-supervisor.")
_LEGACY_PLUGIN_KEYS = {"type", "daemon_socket"}
#: A larger file is no shim of ours (the compiled one is about 2 MiB).
MAX_BYTES = 64 * 1024 * 1024


def marker() -> dict[str, str]:
    return {"installedBy": INSTALLED_BY, "version": version.version()}


def mark_conflist(content: bytes) -> bytes:
    """``content`` (a conflist, JSON object) with our marker key set.

    Raises ValueError for anything but a JSON object (a broken template is
    refused rather than installed)."""
    data = json.loads(content)
    if not isinstance(data, dict):
        raise ValueError("a conflist must be a JSON object")
    data[CONFLIST_KEY] = marker()
    return (json.dumps(data, indent=2) + "\n").encode("utf-8")


def mark_python_shim(script: bytes) -> bytes:
    """The Python shim with the marker line under its shebang."""
    first, _, rest = script.partition(b"\n")
    line = PYTHON_SHIM_MARKER + b" " + version.version().encode() + b"\n"
    return first + b"\n" + line + rest


def conflist_is_ours(data: bytes) -> bool:
    try:
        conflist = json.loads(data)
    except ValueError:
        return False
    if not isinstance(conflist, dict):
        return False
    mark = conflist.get(CONFLIST_KEY)
    if isinstance(mark, dict):
        return mark.get("installedBy") == INSTALLED_BY
    return _legacy_conflist(conflist)


def _legacy_conflist(conflist: dict[str, Any]) -> bool:
    plugins = conflist.get("plugins")
    return ("cniVersions" in conflist and isinstance(plugins, list)
            and len(plugins) == 1 and isinstance(plugins[0], dict)
            and plugins[0].get("type") == SHIM_NAME
            and set(plugins[0]) <= _LEGACY_PLUGIN_KEYS)


def shim_is_ours(data: bytes) -> bool:
    if data.startswith(b"\x7fELF"):
        return GO_SHIM_MARKER in data
    if data.startswith(b"#!"):
        head = data[:4096]
        return PYTHON_SHIM_MARKER in head or _LEGACY_PYTHON_SHIM in head
    return False


def foreign(path: str, kind: str) -> str | None:
    """Why the file at ``path`` is not ours, or None (ours, or absent).

    ``kind`` is ``"shim"`` or ``"conflist"``. A symlink, a directory or
    anything but a regular file is never ours: we only write regular files.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
                     | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{path} is a symbolic link, not a file we wrote"
        return f"{path} cannot be read ({exc.strerror})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return f"{path} is not a regular file"
        if st.st_size > MAX_BYTES:
            return f"{path} was not written by kuryr-supervisor (too large)"
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_BYTES)
    finally:
        os.close(fd)
    ours = shim_is_ours(data) if kind == "shim" else conflist_is_ours(data)
    if ours:
        return None
    how = ("no kuryr-supervisor build marker" if kind == "shim"
           else f'no "{CONFLIST_KEY}" key')
    return f"{path} was not written by kuryr-supervisor ({how})"
