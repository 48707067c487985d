"""The configuration a subcommand reads: the daemon's, parsed and validated
as the daemon does it.

A module of its own, not a function of the package: ``status`` and
``check-config`` both need it, and the package's ``__init__`` dispatches to
them; importing it back from them would make each subcommand's module
depend on the dispatcher that imports it (a cycle the import contracts
refuse).
"""
from __future__ import annotations

from collections.abc import Sequence

from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod


def load_conf(args: Sequence[str]) -> cfg.ConfigOpts:
    """A fresh configuration parsed and validated as the daemon does it
    (raises :class:`~kuryr_supervisor.conf.ConfigError`)."""
    from oslo_log import log
    conf = cfg.ConfigOpts()
    log.register_options(conf)      # the daemon's logging options parse too
    conf_mod.register_opts(conf)
    conf_mod.load(conf, args)
    return conf
