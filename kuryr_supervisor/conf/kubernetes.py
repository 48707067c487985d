"""[kubernetes] options."""
from __future__ import annotations

from oslo_config import cfg

GROUP = "kubernetes"

OPTS: list[cfg.Opt] = []


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]
