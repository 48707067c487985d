"""``kuryr-supervisor check-config``: what the daemon would refuse, alone.

Like ``nginx -t`` and ``sshd -t``: it prints ``ok`` and exits 0, or prints the
one line the daemon would print and exits 78, so ``ExecReload=`` (systemd) and
an upgrade script can refuse a bad file before the running daemon reads it.

It runs every check the daemon makes before forking that takes nothing:
configuration paths that are regular files of UTF-8 text, option
values and the cross-option rules (:func:`kuryr_supervisor.conf.load`),
:func:`kuryr_supervisor.master.preflight.validate` with the configured
role's checks (probe address, socket path trust, handlers installed, state
directory shape and store version: the role's object,
:meth:`~kuryr_supervisor.master.roles.base.Role.validate`),
the ``kubernetes`` extra's libraries in Kubernetes mode (and, through
``validate``, the API's endpoint and the files it trusts), and what the start would
meet when it creates, locks and binds (:mod:`.checks`: a state directory
that cannot be created or written, a probe address that cannot be bound, a
socket path too long or in a read-only place). It takes no lock, listens
on nothing, creates nothing, so it runs beside the daemon it is about; a
lock, port or socket held by a running daemon is a start's question (77).

Groups and options nothing registers (typos) are named with the closest
known name (:func:`kuryr_supervisor.conf.unknown_names`, the lines the
daemon logs at start): warnings on stderr, or with ``--strict`` the
failure, exit 78. The daemon's start-up warnings about files that hold a
secret and others can read are printed too (warnings either way).
"""
from __future__ import annotations

import argparse
import importlib.util
import sys

from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.cli import checks, configuration, usage
from kuryr_supervisor.exitcodes import ExitCode
from kuryr_supervisor.kubernetes import config as k8s_config
from kuryr_supervisor.master import preflight, roles

_ERRORS = (conf_mod.ConfigError, preflight.PreflightError, checks.Refused)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"{usage.PROG} check-config", allow_abbrev=False,
        description="Check a configuration as the daemon would before it "
                    "starts, taking nothing a running daemon holds: prints "
                    "ok (exit 0) or the daemon's one-line refusal (exit 78).",
        epilog=usage.subcommand_epilog())
    p.add_argument("--strict", action="store_true",
                   help="fail (exit 78) on unknown groups and options too, "
                        "instead of warning")
    return p


def _kubernetes_library(conf: cfg.ConfigOpts) -> None:
    if k8s_config.is_configured(conf) and \
            importlib.util.find_spec("urllib3") is None:
        raise conf_mod.ConfigError(k8s_config.missing_library())


def check(args: list[str]) -> cfg.ConfigOpts:
    """Every check, or the first failure as an exception."""
    conf = configuration.load_conf(args)
    _kubernetes_library(conf)       # the install, before the world (as a start)
    role = roles.named(conf.role)
    role.validate(conf)
    checks.run(conf, role.listeners)
    return conf


def main(args: list[str]) -> int:
    own, rest = parser().parse_known_args(args)
    try:
        conf = check(rest)
    except _ERRORS as exc:
        print(f"kuryr-supervisor: configuration error: {exc}", file=sys.stderr)
        return int(ExitCode.CONFIG)
    for line in conf_mod.secret_file_warnings(conf):
        print(f"kuryr-supervisor: warning: {line}", file=sys.stderr)
    strays = conf_mod.unknown_names(conf)
    level = "configuration error" if own.strict else "warning"
    for line in strays:
        print(f"kuryr-supervisor: {level}: {line}", file=sys.stderr)
    if strays and own.strict:
        return int(ExitCode.CONFIG)
    print("ok")
    return int(ExitCode.OK)
