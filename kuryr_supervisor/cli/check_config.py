"""``kuryr-supervisor check-config``: the daemon's pre-fork checks, alone.

Like ``nginx -t`` and ``sshd -t``: it prints ``ok`` and exits 0, or prints the
one line the daemon would print and exits 78, so ``ExecReload=`` (systemd) and
an upgrade script can refuse a bad file before the running daemon reads it.

It runs every check the daemon makes before forking that takes nothing:
option values and the cross-option rules (:func:`kuryr_supervisor.conf.load`),
:func:`kuryr_supervisor.master.preflight.validate` (probe address, socket path
trust, handlers installed, state directory shape), and the Kubernetes client
library in Kubernetes mode. It takes no lock, binds no port, creates no
directory and opens no socket, so it runs beside the daemon it is about; the
checks that would (the state directory lock, a port or socket in use) belong
to a start, where they answer 77, not to a configuration check.
"""
from __future__ import annotations

import importlib.util
import sys

from oslo_config import cfg

from kuryr_supervisor import cli
from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.exitcodes import ExitCode
from kuryr_supervisor.kubernetes import config as k8s_config
from kuryr_supervisor.master import preflight


def _kubernetes_library(conf: cfg.ConfigOpts) -> None:
    if k8s_config.is_configured(conf) and \
            importlib.util.find_spec("kubernetes") is None:
        raise conf_mod.ConfigError(
            "Kubernetes mode needs the kubernetes client library: pip install "
            "'kuryr-supervisor[kubernetes]'")


def check(args: list[str]) -> None:
    """Every check, or the first failure as an exception."""
    conf = cli.load_conf(args)
    preflight.validate(conf)
    _kubernetes_library(conf)


def main(args: list[str]) -> int:
    try:
        check(args)
    except (conf_mod.ConfigError, preflight.PreflightError) as exc:
        print(f"kuryr-supervisor: configuration error: {exc}", file=sys.stderr)
        return int(ExitCode.CONFIG)
    print("ok")
    return int(ExitCode.OK)
