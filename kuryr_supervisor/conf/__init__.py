"""Configuration: one module per option group, registered at start-up.

Each group module exposes ``register_opts(conf)`` and ``list_opts()``; this
package aggregates them for the daemon and for ``oslo-config-generator``
(entry point ``oslo.config.opts = kuryr_supervisor = kuryr_supervisor.conf:list_opts``).
Nothing is registered at import time.
"""
from __future__ import annotations

from oslo_config import cfg

from kuryr_supervisor.conf import cni_daemon, health, ipam, kubernetes, supervisor

CONF = cfg.CONF
_MODULES = (supervisor, health, cni_daemon, ipam, kubernetes)


def register_opts(conf: cfg.ConfigOpts) -> None:
    for module in _MODULES:
        module.register_opts(conf)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    opts: list[tuple[str, list[cfg.Opt]]] = []
    for module in _MODULES:
        opts.extend(module.list_opts())
    return opts
