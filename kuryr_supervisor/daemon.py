"""``kuryr-supervisor``: parse and validate the configuration, set up logging,
take the configured role's object (:mod:`.master.roles`), check in the
master what its workers will need (:mod:`.master.preflight`), run the
master with it. Invalid configuration exits 78 with one line naming the
option; so does Kubernetes mode without the optional ``kubernetes`` client
library (the ``[kubernetes]`` extra), with the command that installs it into
this environment (:func:`kuryr_supervisor.version.install_hint`). Groups and
options of the files that nothing registers are logged as warnings, one
line each with the closest known name, as ``check-config`` prints them. A
second daemon on the same state directory, port or socket exits 77.

The command line: ``--help`` lists the subcommands (:mod:`.cli.usage`),
``--help-all`` every option; a subcommand may stand anywhere among the
options; a word that is neither gets one line naming the closest
subcommand (exit 2, as argparse answers a usage error).
"""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from oslo_log import log

from kuryr_supervisor import cli
from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.cli import usage
from kuryr_supervisor.exitcodes import ExitCode
from kuryr_supervisor.master.sdnotify import Notifier

_QUIET = ["pyroute2=WARN", "urllib3=WARN", "kubernetes=WARN",
          "werkzeug=WARN", "cotyledon=INFO"]


def main(argv: Sequence[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if usage.is_help(args):
        sys.stdout.write(usage.main_help())
        raise SystemExit(ExitCode.OK)
    wanted = cli.subcommand(args)
    if wanted is not None:      # status, check-config: not the daemon
        raise SystemExit(cli.run(*wanted))
    stray = usage.stray_word(args)
    if stray is not None:
        print(f"kuryr-supervisor: {stray}", file=sys.stderr)
        raise SystemExit(ExitCode.USAGE)
    args = ["--help" if a == usage.HELP_ALL else a for a in args]
    conf = conf_mod.CONF
    log.register_options(conf)
    log.set_defaults(default_log_levels=log.get_default_log_levels() + _QUIET)
    conf_mod.register_opts(conf)
    try:
        conf_mod.load(conf, args)
    except conf_mod.ConfigError as exc:
        print(f"kuryr-supervisor: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(ExitCode.CONFIG) from None
    log.setup(conf, "kuryr-supervisor")
    # Captured before the manager exists: cotyledon would answer READY=1
    # at once and drop the variable.
    notifier = Notifier.from_environment()
    # Imported after logging is set up; the heavy client libraries are
    # imported by the master before it forks, so the workers share them.
    from kuryr_supervisor.kubernetes import config as k8s_config
    from kuryr_supervisor.master import preflight, roles
    from kuryr_supervisor.master.manager import Manager
    role = roles.named(conf.role)
    if k8s_config.is_configured(conf):     # a fact of the install: before the world
        try:
            k8s_config.preload()
        except ImportError as exc:
            print(f"kuryr-supervisor: configuration error: "
                  f"{k8s_config.missing_library()} ({exc})", file=sys.stderr)
            raise SystemExit(ExitCode.CONFIG) from None
    try:
        # Held (open) for the master's life, inherited by every worker.
        lock = role.preflight(conf)
    except preflight.PreflightError as exc:
        what = "address in use" if isinstance(exc, preflight.AddressTaken) \
            else "configuration error"
        print(f"kuryr-supervisor: {what}: {exc}", file=sys.stderr)
        raise SystemExit(ExitCode.CONFIG) from None
    except preflight.AlreadyRunning as exc:
        print(f"kuryr-supervisor: already running: {exc}", file=sys.stderr)
        raise SystemExit(ExitCode.ALREADY_RUNNING) from None
    hooks = role.hooks(conf)      # the CNI role's: the shim installed once ready
    master = os.getpid()
    try:
        Manager(conf, role, notifier=notifier, hooks=hooks).run()
    except SystemExit as exc:
        if os.getpid() == master:           # never in a worker
            for hook in hooks.exited:
                hook(exc.code)
        raise
    finally:
        if os.getpid() == master:
            lock.close()


if __name__ == "__main__":
    main()
