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


PASSWORD_LOGIN = ("[DEFAULT]\nrole = controller\n"
                  "[kubernetes]\napi_root = http://127.0.0.1:1\n"
                  "[controller]\npod_network_id = net\n"
                  "[neutron]\nauth_type = password\n"
                  "auth_url = http://127.0.0.1:5000/v3\nusername = kuryr\n"
                  "password = secret\nproject_name = service\n"
                  "user_domain_name = Default\nproject_domain_name = Default\n"
                  "tenant_name = service\nregion_name = RegionOne\n")


def daemon_conf(tmp_path: Path, text: str) -> tuple[cfg.ConfigOpts, Path]:
    """The daemon's own options, loaded and validated as at start."""
    from oslo_log import log

    from kuryr_supervisor import conf as conf_mod
    path = tmp_path / "k.conf"
    path.write_text(text)
    conf = cfg.ConfigOpts()
    log.register_options(conf)
    conf_mod.register_opts(conf)
    conf_mod.load(conf, ["--config-file", str(path)])
    return conf, path


def test_the_auth_plugins_options_are_known(tmp_path: Path) -> None:
    """A full password login (and its deprecated ``tenant_name``): the
    plugin's options are registered only when a handler loads it, and
    known before."""
    from kuryr_supervisor import conf as conf_mod
    conf, _ = daemon_conf(tmp_path, PASSWORD_LOGIN)
    assert conf_mod.unknown_names(conf) == []


def test_a_typo_among_the_auth_plugins_options_is_named(tmp_path: Path) -> None:
    from kuryr_supervisor import conf as conf_mod
    conf, path = daemon_conf(tmp_path, PASSWORD_LOGIN
                             + "project_nam = x\nuser_domian_name = y\n")
    assert conf_mod.unknown_names(conf) == [
        f"{path}: unknown option [neutron] project_nam: did you mean "
        "`project_name`?",
        f"{path}: unknown option [neutron] user_domian_name: did you mean "
        "`user_domain_name`?"]


def test_another_plugins_options_are_unknown(tmp_path: Path) -> None:
    """Known are the options of the plugin named, not of every plugin: an
    application credential's login takes no password."""
    from kuryr_supervisor import conf as conf_mod
    conf, path = daemon_conf(tmp_path, PASSWORD_LOGIN.replace(
        "auth_type = password", "auth_type = v3applicationcredential")
        .replace("username = kuryr\n", "application_credential_id = a\n"
                 "application_credential_secret = s\n")
        .replace("tenant_name = service\n", ""))
    assert conf_mod.unknown_names(conf) == [
        f"{path}: unknown option [neutron] password"]
