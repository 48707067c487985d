"""A configuration file holding a secret must be private and root's: a
warning line per file that is not (``kuryr_supervisor.conf.secretfiles``)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod

KEYSTONE = ("[neutron]\nauth_type = password\nauth_url = http://k:5000/v3\n"
            "username = kuryr\npassword = s3cret\n")
APP_CRED = ("[neutron]\nauth_section = ks\n[ks]\n"
            "auth_type = v3applicationcredential\n"
            "application_credential_id = x\n"
            "application-credential-secret = s3cret\n")
PLAIN = "[ipam]\nsubnet = 10.9.0.0/24\n"


def loaded(args: list[str]) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf(args, project="kuryr-supervisor", default_config_files=[])
    return conf


def write(path: Path, text: str, mode: int) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("text,held", [(KEYSTONE, "password"),
                                       (APP_CRED, "application_credential_secret")])
def test_a_readable_secret_file_is_named_with_its_mode(tmp_path: Path,
                                                       text: str, held: str) -> None:
    path = write(tmp_path / "k.conf", text, 0o644)
    lines = conf_mod.secret_file_warnings(loaded(["--config-file", str(path)]))
    assert lines == [f"configuration file {path} holds a secret ({held}) and "
                     "is readable by group or others (mode 0644): make it "
                     "root's, mode 0600 or 0400"]


def test_private_files_and_files_without_secrets_pass(tmp_path: Path) -> None:
    private = write(tmp_path / "k.conf", KEYSTONE, 0o600)
    plain = write(tmp_path / "p.conf", PLAIN, 0o644)
    conf = loaded(["--config-file", str(private), "--config-file", str(plain)])
    assert conf_mod.secret_file_warnings(conf) == []


@pytest.mark.privileged
def test_a_secret_file_not_owned_by_root(tmp_path: Path) -> None:
    path = write(tmp_path / "k.conf", KEYSTONE, 0o600)
    os.chown(path, 65534, 65534)
    (line,) = conf_mod.secret_file_warnings(loaded(["--config-file", str(path)]))
    assert line.startswith(f"configuration file {path} holds a secret")
    assert "owned by uid 65534, not root" in line and "readable" not in line


def test_every_file_of_a_config_dir(tmp_path: Path) -> None:
    directory = tmp_path / "conf.d"
    directory.mkdir()
    write(directory / "10-ipam.conf", PLAIN, 0o644)
    secret = write(directory / "20-neutron.conf", KEYSTONE, 0o640)
    write(directory / "ignored.txt", KEYSTONE, 0o644)   # oslo reads *.conf only
    (line,) = conf_mod.secret_file_warnings(
        loaded(["--config-dir", str(directory)]))
    assert f"{secret} holds a secret (password)" in line
    assert "(mode 0640)" in line


def test_a_secret_option_name_in_a_file_without_auth_plugin(tmp_path: Path) -> None:
    """``password`` with no auth_type naming a plugin is no option of ours:
    oslo.config ignores it, and so does the check."""
    path = write(tmp_path / "k.conf", "[neutron]\npassword = x\n", 0o644)
    assert conf_mod.secret_file_warnings(loaded(["--config-file", str(path)])) == []
