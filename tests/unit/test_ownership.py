"""Which host files are ours: the installer's markers, and what is foreign.

Every foreign sample here is the shape another CNI really ships: upstream
Kuryr's conflist and its pip console-script shim, and a Go binary that is
not built from our module.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from kuryr_supervisor.cni import install, ownership

#: upstream Kuryr's 10-kuryr.conflist (kuryr-kubernetes cni_ds_init).
KURYR_CONFLIST = json.dumps({
    "cniVersion": "0.3.1", "name": "kuryr",
    "plugins": [{"type": "kuryr-cni", "kuryr_conf": "/etc/kuryr/kuryr.conf",
                 "debug": True}]}).encode()
#: upstream Kuryr's Python kuryr-cni: a pip console script.
KURYR_SHIM = (b"#!/usr/bin/python3\n# -*- coding: utf-8 -*-\nimport re\n"
              b"import sys\nfrom kuryr_kubernetes.cmd.cni import run\n"
              b"if __name__ == '__main__':\n    sys.exit(run())\n")


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def test_generated_and_templated_conflists_are_ours(tmp_path: Path) -> None:
    generated = install.default_conflist("kuryr", "unix:///run/x.sock")
    mark = json.loads(generated)[ownership.CONFLIST_KEY]
    assert mark["installedBy"] == "kuryr-supervisor" and mark["version"]
    assert ownership.foreign(write(tmp_path / "a", generated), "conflist") is None
    templated = ownership.mark_conflist(KURYR_CONFLIST)
    assert json.loads(templated)["plugins"] == json.loads(KURYR_CONFLIST)["plugins"]
    assert ownership.foreign(write(tmp_path / "b", templated), "conflist") is None
    with pytest.raises(ValueError):
        ownership.mark_conflist(b"[1, 2]")


def test_a_conflist_from_before_the_marker_is_ours(tmp_path: Path) -> None:
    data = json.loads(install.default_conflist("kuryr", "unix:///x"))
    del data[ownership.CONFLIST_KEY]
    assert ownership.conflist_is_ours(json.dumps(data).encode())
    data["plugins"][0]["debug"] = True          # not what we ever wrote
    assert not ownership.conflist_is_ours(json.dumps(data).encode())


@pytest.mark.parametrize("data", [
    KURYR_CONFLIST, b"{not json", b"[]",
    json.dumps({ownership.CONFLIST_KEY: {"installedBy": "someone-else"},
                "plugins": []}).encode()])
def test_foreign_conflists(tmp_path: Path, data: bytes) -> None:
    path = write(tmp_path / "10-kuryr.conflist", data)
    reason = ownership.foreign(path, "conflist")
    assert reason == (f"{path} was not written by kuryr-supervisor "
                      f'(no "{ownership.CONFLIST_KEY}" key)')


def test_python_shims(tmp_path: Path) -> None:
    ours = install.shim_script()
    assert ours.splitlines()[1].startswith(ownership.PYTHON_SHIM_MARKER)
    assert ownership.foreign(write(tmp_path / "ours", ours), "shim") is None
    before_marker = b"#!/usr/bin/env python3\n" + \
        Path(install.SHIM_SOURCE).read_bytes().split(b"\n", 1)[1]
    assert ownership.shim_is_ours(before_marker)
    path = write(tmp_path / "kuryr-cni", KURYR_SHIM)
    assert "no kuryr-supervisor build marker" in str(ownership.foreign(path, "shim"))


def test_the_compiled_shim_carries_the_go_build_marker(go_shim: Path,
                                                       tmp_path: Path) -> None:
    assert ownership.foreign(str(go_shim), "shim") is None
    other = tmp_path / "kuryr-cni"                 # some other Go or C binary
    shutil.copy(shutil.which("true") or "/bin/true", other)
    assert ownership.foreign(str(other), "shim") is not None


def test_links_and_directories_are_never_ours(tmp_path: Path) -> None:
    ours = write(tmp_path / "ours", install.shim_script())
    link = tmp_path / "kuryr-cni"
    link.symlink_to(ours)
    assert "is a symbolic link" in str(ownership.foreign(str(link), "shim"))
    (tmp_path / "dir").mkdir()
    assert "not a regular file" in str(ownership.foreign(str(tmp_path / "dir"),
                                                         "shim"))
    assert ownership.foreign(str(tmp_path / "absent"), "shim") is None


def test_a_fifo_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "kuryr-cni"
    os.mkfifo(fifo)
    assert "not a regular file" in str(ownership.foreign(str(fifo), "shim"))
