"""The command line's shape: which subcommand, and the help that says so.

oslo.config parses the daemon's options with argparse and knows nothing of
subcommands: its ``--help`` is a hundred lines of logging options, and a
subcommand after an option is an "unrecognized argument". So the
subcommand is found here first, wherever it stands (a word equal to a
subcommand's name that is not the value of the option before it), and the
daemon's ``--help`` is written here: the subcommands with one line each
and the options an operator needs; ``--help-all`` is oslo's full list. A
word that is neither an option, an option's value nor a subcommand gets one
line naming the closest subcommand.
"""
from __future__ import annotations

import difflib
import textwrap
from collections.abc import Sequence

from oslo_config import cfg

PROG = "kuryr-supervisor"
SUBCOMMANDS = {
    "status": "ask the running daemon how it is (exit 0, 1 or 2)",
    "check-config": "check a configuration as the daemon would (ok or 78)",
}
CHECK_FLAG = "--check-config"
HELP_ALL = "--help-all"
#: Options that take no value: oslo.config's own, oslo.log's booleans and
#: the daemon's flags (every other option takes one).
_NO_VALUE = frozenset({
    "-h", "--help", HELP_ALL, "--version", CHECK_FLAG, "--debug", "-d",
    "--nodebug", "--use-syslog", "--nouse-syslog", "--use-journal",
    "--nouse-journal", "--use-json", "--nouse-json", "--use-eventlog",
    "--nouse-eventlog", "--watch-log-file", "--nowatch-log-file",
    "--verbose", "-v", "--noverbose", "--json", "--strict"})


def _takes_value(flag: str) -> bool:
    return flag.startswith("-") and "=" not in flag and flag not in _NO_VALUE


def positionals(args: Sequence[str]) -> list[tuple[int, str]]:
    """(index, word) of each argument that is neither an option nor the
    value of the option before it."""
    found = []
    for i, arg in enumerate(args):
        if arg == "--":
            found += [(j, a) for j, a in enumerate(args[i + 1:], i + 1)]
            break
        if arg.startswith("-") and arg != "-":
            continue
        if i > 0 and _takes_value(args[i - 1]):
            continue
        found.append((i, arg))
    return found


def find_subcommand(args: Sequence[str]) -> tuple[str, list[str]] | None:
    """(name, the other arguments) when ``args`` name a subcommand."""
    for i, word in positionals(args):
        if word in SUBCOMMANDS:
            return word, [*args[:i], *args[i + 1:]]
    if CHECK_FLAG in args:
        return "check-config", [a for a in args if a != CHECK_FLAG]
    return None


def stray_word(args: Sequence[str]) -> str | None:
    """One line for the first word that is no subcommand, or None."""
    for _, word in positionals(args):
        close = difflib.get_close_matches(word, list(SUBCOMMANDS), n=1,
                                          cutoff=0.5)
        hint = (f"did you mean `{PROG} {close[0]}`?" if close
                else f"the subcommands are {', '.join(SUBCOMMANDS)}")
        return (f"unknown subcommand or argument {word!r}: {hint} "
                f"(`{PROG} --help` lists them)")
    return None


def _opt_line(flag: str, text: str) -> str:
    return textwrap.fill(text, width=79, initial_indent=f"  {flag:<22} ",
                         subsequent_indent=" " * 25, break_on_hyphens=False)


def main_help(conf: cfg.ConfigOpts | None = None) -> str:
    """``kuryr-supervisor --help``: the subcommands first, then the options
    an operator needs; the rest behind ``--help-all``."""
    role_help = "cni (default) or controller: which workers the master runs"
    lines = [
        f"usage: {PROG} [SUBCOMMAND] [--config-file PATH]...",
        f"       {' ' * len(PROG)} [--config-dir DIR]... [OPTIONS]",
        "",
        "Without a subcommand, runs the daemon in the foreground (Ctrl-C or",
        "SIGTERM stops it gracefully). Options and the subcommand may come",
        f"in any order. `{PROG} SUBCOMMAND --help` shows a subcommand's",
        "options.",
        "",
        "subcommands:",
        *(_opt_line(name, text) for name, text in SUBCOMMANDS.items()),
        "",
        "options:",
        _opt_line("--config-file PATH", "a configuration file (repeatable; "
                  "default: /etc/kuryr-supervisor/kuryr-supervisor.conf "
                  "if it exists)"),
        _opt_line("--config-dir DIR", "every *.conf file in DIR, after the "
                  "files (repeatable)"),
        _opt_line("--role ROLE", role_help),
        _opt_line(CHECK_FLAG, "same as the check-config subcommand"),
        _opt_line("--version", "print the version and exit"),
        _opt_line("-h, --help", "this help; SUBCOMMAND --help: a "
                  "subcommand's own"),
        _opt_line(HELP_ALL, "every command-line option (logging "
                  "included, from oslo.config and oslo.log)"),
        "",
        "Every option of the configuration files can also be set in the",
        "environment as OS_<GROUP>__<OPTION>; the reference is in the",
        "documentation (doc/source/configuration).",
    ]
    return "\n".join(lines) + "\n"


def is_help(args: Sequence[str]) -> bool:
    return any(a in ("-h", "--help") for a in args) and \
        find_subcommand(args) is None


def subcommand_epilog() -> str:
    return (f"It also takes the daemon's options, in any order: "
            f"--config-file PATH and --config-dir DIR (default: the daemon's "
            f"files), --role ROLE; `{PROG} {HELP_ALL}` lists them all.")
