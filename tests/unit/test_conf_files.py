"""Configuration files that are not UTF-8 text: refused before oslo.config
reads them, with the file and the first bad byte's offset, at start and on
reload (real files, a real ConfigOpts)."""
from __future__ import annotations

import codecs
from pathlib import Path

import pytest
from oslo_config import cfg
from oslo_log import log

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.conf import files

GOOD = "[supervisor]\n# caf\u00e9, 10 \u20ac\nmax_restarts = 3\n"


@pytest.mark.parametrize("data, problem", [
    (GOOD.encode(), None),
    (b"", None),
    (b"[DEFAULT]\n# caf\xe9\n", "byte 15 (0xe9) is not UTF-8"),
    (b"\xff", "byte 0 (0xff) is not UTF-8"),
    # A sequence cut short by the end of the file.
    ("[DEFAULT]\n# \u20ac".encode()[:-1], "byte 12 (0xe2) is not UTF-8"),
    (codecs.BOM_UTF8 + GOOD.encode(), "starts with a UTF-8 byte order mark"),
])
def test_the_first_bad_byte_is_named(tmp_path: Path, data: bytes,
                                     problem: str | None) -> None:
    path = tmp_path / "k.conf"
    path.write_bytes(data)
    found = files.utf8_problem(str(path))
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem), found


@pytest.mark.parametrize("before", [files._CHUNK - 2, files._CHUNK - 1,
                                    files._CHUNK, 3 * files._CHUNK + 5])
def test_offsets_hold_across_reads(tmp_path: Path, before: int) -> None:
    """The file is read in chunks: a character split between two reads is
    UTF-8, and a bad byte's offset counts from the file's start."""
    path = tmp_path / "k.conf"
    euro = "\u20ac".encode()
    path.write_bytes(b"#" * before + euro + b"\xc3(" + b"\n")
    assert files.utf8_problem(str(path)) == (
        f"byte {before + len(euro)} (0xc3) is not UTF-8: configuration "
        "files are UTF-8 text")


def fresh() -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    log.register_options(conf)
    conf_mod.register_opts(conf)
    return conf


@pytest.mark.parametrize("flag", ["--config-file", "--config-dir"])
def test_load_refuses_the_file_in_one_line(tmp_path: Path, flag: str) -> None:
    directory = tmp_path / "conf.d"
    directory.mkdir()
    path = directory / "10-latin1.conf"
    path.write_bytes(b"[supervisor]\n# caf\xe9\nmax_restarts = 3\n")
    arg = str(path if flag == "--config-file" else directory)
    with pytest.raises(conf_mod.ConfigError) as err:
        conf_mod.load(fresh(), [flag, arg])
    what = "--config-file" if flag == "--config-file" else "--config-dir file"
    assert str(err.value) == (f"{what} {path}: byte 18 (0xe9) is not UTF-8: "
                              "configuration files are UTF-8 text")


def test_a_reload_of_a_file_made_latin1_is_refused(tmp_path: Path) -> None:
    """SIGHUP's path: the previous values stay, nothing is raised."""
    path = tmp_path / "k.conf"
    path.write_text(GOOD)
    conf = fresh()
    conf_mod.load(conf, ["--config-file", str(path)])
    path.write_bytes(b"[supervisor]\n# caf\xe9\nmax_restarts = 7\n")
    assert conf_mod.reload(conf) is False
    assert conf.supervisor.max_restarts == 3
