"""Where the subcommand is among the options (kuryr_supervisor.cli.usage)."""
from __future__ import annotations

import pytest

from kuryr_supervisor.cli import usage


@pytest.mark.parametrize("args,found", [
    (["status"], ("status", [])),
    (["--role", "controller", "check-config"], ("check-config",
                                                ["--role", "controller"])),
    (["--config-file", "a.conf", "status", "--json"],
     ("status", ["--config-file", "a.conf", "--json"])),
    (["--debug", "status"], ("status", ["--debug"])),
    (["--config-file=status", "check-config"],
     ("check-config", ["--config-file=status"])),
    # A value named like a subcommand is the option's value.
    (["--config-file", "status"], None),
    (["--config-file", "status", "check-config"],
     ("check-config", ["--config-file", "status"])),
    (["--config-file", "a.conf", "--check-config"],
     ("check-config", ["--config-file", "a.conf"])),
    (["--config-file", "a.conf"], None),
])
def test_find_subcommand(args: list[str],
                         found: tuple[str, list[str]] | None) -> None:
    assert usage.find_subcommand(args) == found


def test_a_stray_word_names_the_closest_subcommand() -> None:
    assert "`kuryr-supervisor check-config`" in (
        usage.stray_word(["--role", "cni", "check-confg"]) or "")
    assert "the subcommands are status, check-config" in (
        usage.stray_word(["zzz"]) or "")
    assert usage.stray_word(["--config-file", "x", "--debug"]) is None


def test_help_is_short_and_names_every_subcommand() -> None:
    text = usage.main_help()
    assert all(len(line) <= 79 for line in text.splitlines())
    for name in usage.SUBCOMMANDS:
        assert any(line.split()[:1] == [name] for line in text.splitlines())
    assert usage.is_help(["--help"]) and usage.is_help(["--role", "x", "-h"])
    assert not usage.is_help(["status", "--help"])
