"""Configuration files that hold a secret must be private to the daemon.

A file (``--config-file``, or a ``*.conf`` in a ``--config-dir``) holds a
secret when it sets an option marked ``secret=True``: one of ours, or one of
the keystoneauth plugin named by an ``auth_type`` in the files (the
``password`` plugin's ``password``, ``v3applicationcredential``'s
``application_credential_secret``, ``token``, ...), in any section, since
``auth_section`` may put them anywhere.

Private means (:func:`problems`): for a daemon running as root, root's and
readable by root alone (0600, 0400). For a daemon running as an unprivileged
uid (the controller role's Deployment), either its own file readable by it
alone, or a root-owned file that only its group may read besides root
(0640, 0440) -- PostgreSQL's rule for its key file, and the only way a
Kubernetes Secret reaches a non-root container without being readable by
all (``fsGroup`` makes the Secret's files root's, group-readable by that
group).

Such a file that is not private gets one warning line at start naming the
file, its mode and its owner. A warning, not a refusal as sshd refuses a
loose private key: Kubernetes mounts Secrets and ConfigMaps 0644 unless the
manifest sets ``defaultMode``, and inside the daemon's container nobody else
reads them; refusing would stop every such deployment over a risk the
operator may have accepted. On a host where other users log in, the warning
says what to fix.
"""
from __future__ import annotations

import glob
import os
import stat
from collections.abc import Callable, Collection, Iterable

from oslo_config import cfg


def config_files(conf: cfg.ConfigOpts) -> list[str]:
    """Every file the configuration was read from, in oslo.config's order."""
    files = list(conf.config_file or [])
    for directory in conf.config_dir or []:
        files += sorted(glob.glob(os.path.join(directory, "*.conf")))
    return files


def _keys(path: str) -> dict[str, dict[str, list[str]]]:
    sections: dict[str, dict[str, list[str]]] = {}
    cfg.ConfigParser(path, sections).parse()
    return sections


def _normal(name: str) -> str:
    return name.strip().replace("-", "_").lower()


def secret_names(registered: Iterable[cfg.Opt],
                 auth_types: Iterable[str]) -> set[str]:
    """Names of secret options: ours, and those of the named auth plugins."""
    names = {_normal(o.dest) for o in registered if o.secret}
    auth_types = set(auth_types)
    if not auth_types:   # keystoneauth1 costs every process ~5 MiB: ask only
        return names     # when a file names a plugin
    try:
        from keystoneauth1 import exceptions as ks_exc
        from keystoneauth1 import loading as ks_loading
    except ImportError:      # no openstack extra: no plugin to ask
        return names
    for auth_type in auth_types:
        try:
            plugin_opts = ks_loading.get_auth_plugin_conf_options(auth_type)
        except (ks_exc.NoMatchingPlugin, RuntimeError):
            continue         # validate() reports a bad auth_type
        names |= {_normal(o.dest) for o in plugin_opts if o.secret}
    return names


def problems(st: os.stat_result, euid: int,
             groups: Collection[int]) -> list[str]:
    """What keeps a secret-holding file with ``st`` from being private to
    a daemon of uid ``euid`` and groups ``groups``; empty when it is."""
    mode = stat.S_IMODE(st.st_mode)
    found = []
    group_ok = euid != 0 and st.st_uid == 0 and st.st_gid in groups
    readable = stat.S_IROTH | (0 if group_ok else stat.S_IRGRP)
    if mode & readable:
        found.append(f"is readable by group or others (mode {mode:04o})")
    if st.st_uid not in (0, euid):
        found.append(f"is owned by uid {st.st_uid}, not "
                     f"{'root' if euid == 0 else f'root or uid {euid}'}")
    return found


def _fix(euid: int) -> str:
    if euid == 0:
        return "make it root's, mode 0600 or 0400"
    return (f"make it uid {euid}'s, mode 0600 or 0400, or root's in the "
            "daemon's group, mode 0640 or 0440")


def warnings(conf: cfg.ConfigOpts, registered: Iterable[cfg.Opt], *,
             stat_file: Callable[[str], os.stat_result] = os.stat,
             euid: int | None = None,
             groups: Collection[int] | None = None) -> list[str]:
    """One line per secret-holding file that is not private to the daemon
    (:func:`problems`); empty when every such file is. ``euid`` and
    ``groups``: the daemon's (default: this process's uid and groups)."""
    euid = os.geteuid() if euid is None else euid
    if groups is None:
        groups = {os.getegid(), *os.getgroups()}
    parsed = []
    for path in config_files(conf):
        try:
            parsed.append((path, _keys(path)))
        except (OSError, cfg.ParseError):
            continue         # oslo.config already read it; nothing to add
    auth_types = [v.strip() for _, sections in parsed
                  for values in sections.values()
                  for k, vs in values.items() if _normal(k) == "auth_type"
                  for v in vs]
    secrets = secret_names(registered, auth_types)
    lines = []
    for path, sections in parsed:
        held = sorted({_normal(k) for values in sections.values()
                       for k in values} & secrets)
        if not held:
            continue
        found = problems(stat_file(path), euid, groups)
        if found:
            lines.append(f"configuration file {path} holds a secret "
                         f"({', '.join(held)}) and {' and '.join(found)}: "
                         f"{_fix(euid)}")
    return lines
