"""The operator's subcommands beside the daemon: ``status`` and ``check-config``.

``kuryr-supervisor`` alone runs the daemon; ``kuryr-supervisor status`` asks a
running one how it is (:mod:`.status`), ``kuryr-supervisor check-config`` (or
``--check-config``) checks a configuration the way the daemon would before
forking, without taking anything a running daemon holds (:mod:`.check_config`).
Both read the same configuration files and options as the daemon (the same
``--config-file``/``--config-dir`` and the same default files), so they talk
about the daemon that configuration describes. The subcommand and the options
come in any order (``kuryr-supervisor --role controller check-config``);
:mod:`.usage` finds the subcommand and writes the help; both load the
configuration with :mod:`.configuration`. This module only dispatches:
the subcommands' modules never import it back (``.importlinter``).

Layer (``.importlinter``): between the entry point and the master. The
subcommands use the configuration and the master's pre-fork checks; nothing
below imports them, and they never import the workers: a subcommand costs a
fraction of the daemon's start-up.
"""
from __future__ import annotations

from collections.abc import Sequence

from kuryr_supervisor.cli import usage

#: Each subcommand and its one line in ``kuryr-supervisor --help``.
SUBCOMMANDS = usage.SUBCOMMANDS
#: The flag spelling of check-config, as ``nginx -t`` / ``sshd -t`` users
#: expect a flag (anywhere on the command line).
CHECK_FLAG = usage.CHECK_FLAG


def subcommand(args: Sequence[str]) -> tuple[str, list[str]] | None:
    """(name, remaining arguments) when ``args`` asks for a subcommand,
    wherever it stands among the options."""
    return usage.find_subcommand(args)


def run(name: str, args: list[str]) -> int:
    """Run one subcommand; returns its exit status."""
    if name == "status":
        from kuryr_supervisor.cli import status
        return status.main(args)
    from kuryr_supervisor.cli import check_config
    return check_config.main(args)
