"""Groups and options in the configuration files that nothing registers.

oslo.config ignores them: ``[supervisor] max_restart = 2`` (a typo) leaves
``max_restarts`` at its default and says nothing, and so does a misspelt
group. The daemon (a warning each, at start) and ``check-config`` (a
warning by default, the failure with ``--strict``) name each one with the
closest known name (difflib, as git and argparse suggest). Known are the
options registered on the loaded configuration (the daemon's, oslo.log's,
those registered from parsed values), the options given beside it (the
``[neutron]`` auth plugin's, which keystoneauth registers only when it
loads the plugin) and their deprecated names and groups (Kuryr's
spellings). A group of the other role (``[neutron]`` read by the CNI
role: one file may serve both) is not this configuration's business: it is
passed over, options and all.
"""
from __future__ import annotations

import difflib
import glob
import os
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping

from oslo_config import cfg

DEFAULT = "DEFAULT"


def _norm(name: str) -> str:
    return name.replace("-", "_")


def registered(conf: cfg.ConfigOpts) -> dict[str, list[cfg.Opt]]:
    """{group: the options registered on ``conf`` in it} (``DEFAULT``: those
    of no group), whoever registered them (us, oslo.log, a plugin).

    The one reader of oslo.config's registry, on purpose: its public
    interface (``conf`` and ``conf[group]`` as mappings) yields names and
    values, never the :class:`cfg.Opt` -- and the names and groups a file
    may still set an option under (``Opt.deprecated_opts``, Kuryr's
    spellings) are on the Opt alone. Nor can the mapping tell a group from
    a [DEFAULT] option without reading the option's value, which may be
    the very one the file got wrong.
    """
    found = {DEFAULT: [info["opt"] for info in conf._opts.values()]}  # noqa: SLF001
    for name, group in conf._groups.items():  # noqa: SLF001
        found[name] = [info["opt"] for info in group._opts.values()]  # noqa: SLF001
    return found


def known(conf: cfg.ConfigOpts,
          also: Mapping[str, Iterable[cfg.Opt]] | None = None
          ) -> dict[str, set[str]]:
    """{group: option names} registered on ``conf`` or given in ``also``
    ({group: options}), deprecated ones too."""
    names: defaultdict[str, set[str]] = defaultdict(set)
    groups = registered(conf)
    for name, opts in (also or {}).items():
        groups[name] = [*groups.get(name, []), *opts]
    for group, opts in groups.items():
        names[group]            # noqa: B018 - a group with no option is known
        for opt in opts:
            names[group].update({_norm(opt.name), _norm(opt.dest)})
            for old in opt.deprecated_opts:
                names[old.group or group].add(_norm(old.name or opt.name))
    return dict(names)


def files(conf: cfg.ConfigOpts) -> list[str]:
    """The files ``conf`` was read from, in oslo.config's order."""
    found = list(conf.config_file or [])
    for directory in conf.config_dir or []:
        found += sorted(glob.glob(os.path.join(directory, "*.conf")))
    return found


def _closest(word: str, choices: set[str]) -> str:
    match = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f": did you mean `{match[0]}`?" if match else ""


def report(conf: cfg.ConfigOpts, elsewhere: Collection[str] = (),
           also: Mapping[str, Iterable[cfg.Opt]] | None = None) -> list[str]:
    """One line per unknown group or option, naming its file; groups in
    ``elsewhere`` (another role's) are passed over when not registered;
    ``also``: {group: options} known though not registered on ``conf``."""
    names = known(conf, also)
    lines = []
    for path in files(conf):
        sections: dict[str, dict[str, list[str]]] = {}
        try:
            cfg.ConfigParser(path, sections).parse()
        except (OSError, cfg.Error, ValueError):
            continue                # oslo.config has judged the file
        for group, items in sections.items():
            if group not in names and group in elsewhere:
                continue
            if group not in names:
                lines.append(f"{path}: unknown group [{group}]"
                             f"{_closest(group, {*names, *elsewhere})}")
                continue
            for key in items:
                if _norm(key) not in names[group]:
                    lines.append(f"{path}: unknown option [{group}] {key}"
                                 f"{_closest(_norm(key), names[group])}")
    return lines
