"""Unknown groups and options in configuration files, against a real
ConfigOpts and real files: registered names, dashes, deprecated names and
groups are known; the rest is named with the closest known name."""
from __future__ import annotations

from pathlib import Path

from oslo_config import cfg

from kuryr_supervisor.conf import unknown


def conf_for(tmp_path: Path, text: str) -> tuple[cfg.ConfigOpts, Path]:
    path = tmp_path / "k.conf"
    path.write_text(text)
    conf = cfg.ConfigOpts()
    conf.register_opts([
        cfg.IntOpt("max_restarts", default=5),
        cfg.IntOpt("restart_window", default=300,
                   deprecated_opts=[cfg.DeprecatedOpt("window",
                                                      group="old_sup")]),
    ], group="supervisor")
    conf.register_opt(cfg.StrOpt("role", default="cni"))
    conf(["--config-file", str(path)])
    return conf, path


def test_known_names_pass(tmp_path: Path) -> None:
    conf, _ = conf_for(tmp_path, "[DEFAULT]\nrole = cni\n[supervisor]\n"
                       "max-restarts = 1\nrestart_window = 2\n"
                       "[old_sup]\nwindow = 3\n")
    assert unknown.report(conf) == []


def test_typos_get_the_closest_name(tmp_path: Path) -> None:
    conf, path = conf_for(tmp_path, "[DEFAULT]\nrole = cni\nrol = x\n"
                          "[supervisor]\nmax_restart = 1\nzzz = 2\n"
                          "[supervisr]\nx = 1\n[elsewhere]\ny = 2\n")
    assert unknown.report(conf) == [
        f"{path}: unknown option [DEFAULT] rol: did you mean `role`?",
        f"{path}: unknown option [supervisor] max_restart: did you mean "
        "`max_restarts`?",
        f"{path}: unknown option [supervisor] zzz",
        f"{path}: unknown group [supervisr]: did you mean `supervisor`?",
        f"{path}: unknown group [elsewhere]"]


def test_another_roles_group_is_passed_over(tmp_path: Path) -> None:
    conf, path = conf_for(tmp_path, "[neutron]\npassword = x\n"
                          "[neutrno]\npassword = x\n")
    assert unknown.report(conf, {"neutron"}) == [
        f"{path}: unknown group [neutrno]: did you mean `neutron`?"]
