"""Configuration: one module per option group, registered at start-up.

Each group module exposes ``register_opts(conf)`` and ``list_opts()`` and may
expose ``validate(conf)`` for checks across options. This package aggregates
them for the daemon and for ``oslo-config-generator`` (entry point
``oslo.config.opts``). Nothing is registered at import time.

oslo.config checks a value only when it is read, so :func:`validate` reads
every option once: a bad value is refused at start (or on reload) with one
line naming the option, instead of surfacing later inside a worker. Before
anything is read, :func:`load` refuses a configuration path that is not a
regular file of UTF-8 text (:mod:`.files`); after it, names nothing
registers (a typo) are told apart by :func:`unknown_names` (:mod:`.unknown`).
"""
from __future__ import annotations

import re
import types
from collections.abc import Collection, Sequence

from oslo_config import cfg

from kuryr_supervisor import version
from kuryr_supervisor.conf import (
    binding,
    cni_daemon,
    cni_install,
    controller,
    files,
    health,
    ipam,
    kubernetes,
    metrics,
    network_health,
    network_policy,
    node_port,
    secretfiles,
    services,
    supervisor,
    unknown,
    vif_pool,
)

CONF = cfg.CONF
PROJECT = files.PROJECT
_MODULES: tuple[types.ModuleType, ...] = (
    supervisor, health, metrics, cni_daemon, ipam, binding, kubernetes,
    cni_install, controller, vif_pool, network_health, services, node_port,
    network_policy)


class ConfigError(Exception):
    """An invalid option value, with the option named in the message."""


def register_opts(conf: cfg.ConfigOpts) -> None:
    for module in _MODULES:
        module.register_opts(conf)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """Every option, for the sample file and the option reference:
    ``role`` (a command-line option, ``--role``, also read from
    ``[DEFAULT]``) included."""
    opts: list[tuple[str, list[cfg.Opt]]] = [("DEFAULT", [controller.ROLE_OPT])]
    for module in _MODULES:
        opts.extend(module.list_opts())
    return opts


def _registered_opts(conf: cfg.ConfigOpts) -> list[tuple[str, list[cfg.Opt]]]:
    opts: list[tuple[str, list[cfg.Opt]]] = []
    for module in _MODULES:
        opts.extend(controller.list_opts(conf) if module is controller
                    else module.list_opts())
    return opts


def validate(conf: cfg.ConfigOpts) -> None:
    """Register what depends on parsed values, read every option once and
    run the cross-option checks."""
    try:
        controller.register_late(conf)
    except (cfg.Error, ValueError) as exc:
        raise ConfigError(_one_line(exc)) from exc
    for group, opts in _registered_opts(conf):
        for opt in opts:
            try:
                getattr(conf[group], opt.dest)
            except (cfg.Error, ValueError) as exc:
                raise ConfigError(
                    f"invalid value for [{group}] {opt.name}: "
                    f"{_one_line(exc)}") from exc
    for module in _MODULES:
        check = getattr(module, "validate", None)
        if check is not None:
            try:
                check(conf)
            except ValueError as exc:
                raise ConfigError(_one_line(exc)) from exc


def secret_file_warnings(conf: cfg.ConfigOpts, *, euid: int | None = None,
                         groups: Collection[int] | None = None) -> list[str]:
    """A line for each configuration file that holds a secret and is not
    private to the daemon (:mod:`.secretfiles`; ``euid`` and ``groups``
    default to this process's)."""
    registered = [opt for _, opts in _registered_opts(conf) for opt in opts]
    return secretfiles.warnings(conf, registered, euid=euid, groups=groups)


def unknown_names(conf: cfg.ConfigOpts) -> list[str]:
    """A line for each group or option of the files ``conf`` was read from
    that nothing registers, with the closest known name (:mod:`.unknown`);
    the other role's groups are known. Named, not loaded: ``[neutron]``'s
    options would import keystoneauth1 (some 5 MiB in every process) into
    a daemon that never talks to OpenStack. Where ``[neutron]`` is
    registered, the options of the auth plugin it names are known too."""
    return unknown.report(conf, {group for group, _ in _registered_opts(conf)}
                          | {controller.NEUTRON_GROUP},
                          controller.auth_plugin_opts(conf))


def load(conf: cfg.ConfigOpts, argv: Sequence[str]) -> None:
    """Parse the command line and files into ``conf`` and validate them.

    The files are checked first (:func:`.files.check`: never a hang on a
    FIFO or ``/dev/zero``, never a traceback on a byte that is not UTF-8).
    ``--version`` prints the installed package's version and exits 0.
    """
    try:
        files.check(argv)
    except files.Refused as exc:
        raise ConfigError(str(exc)) from exc
    try:
        conf(list(argv), project=PROJECT, version=version.version())
    except cfg.Error as exc:
        raise ConfigError(_one_line(exc)) from exc
    validate(conf)


def candidate_args(conf: cfg.ConfigOpts) -> list[str]:
    """The command line that re-reads the files ``conf`` was loaded from."""
    args: list[str] = []
    for path in conf.config_file or []:
        args += ["--config-file", path]
    for path in conf.config_dir or []:
        args += ["--config-dir", path]
    return args


def reload(conf: cfg.ConfigOpts) -> bool:
    """Apply changed mutable options (SIGHUP) if the files are valid.

    The files are first parsed into a throw-away ConfigOpts and validated; an
    invalid file is refused and nothing changes.
    """
    from oslo_log import log

    candidate = cfg.ConfigOpts()
    log.register_options(candidate)
    register_opts(candidate)
    try:
        load(candidate, candidate_args(conf))
    except ConfigError as exc:
        log.getLogger(__name__).error(
            "configuration reload refused, previous values kept: %s", exc)
        return False
    conf.mutate_config_files()
    return True


# oslo.config's "Value for option X from LocationInfo(location=<...>,
# detail='FILE') is not valid: WHY": the option is already named by us.
_LOCATION = re.compile(r"Value for option \S+ from LocationInfo\(location=<[^>]*>, "
                       r"detail=(?:'(?P<file>[^']*)'|[^)]*)\) is not valid: ")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    found = _LOCATION.search(text)
    if found is None:
        return text
    where = f" (in {found['file']})" if found["file"] else ""
    return _LOCATION.sub("", text) + where
