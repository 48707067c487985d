"""The daemon's roles, one object each (:mod:`.base` says what a role names):
:mod:`.cni`, the node daemon, and :mod:`.controller`, the cluster's
handlers. :func:`named` loads the module of the role asked for only, so a
CNI daemon never imports the controller's.
"""
from __future__ import annotations

import importlib

from kuryr_supervisor.conf.controller import ROLES
from kuryr_supervisor.master.roles.base import Hooks, Role

__all__ = ["NAMES", "Hooks", "Role", "named"]

#: The values ``role`` takes, each the name of the module defining it.
NAMES = ROLES


def named(name: str) -> Role:
    """The role called ``name`` (one of :data:`NAMES`: the configuration's
    check of ``role`` refuses any other first)."""
    if name not in NAMES:
        raise ValueError(f"no role named {name!r}")
    role: Role = importlib.import_module(f"{__name__}.{name}").ROLE
    return role
