"""A configuration file holding a secret must be private to the daemon
(root's for a root daemon): a warning line per file that is not
(``kuryr_supervisor.conf.secretfiles``)."""
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
    uid = os.geteuid()      # the file's owner and the daemon's, root or not
    owner = "root's, mode 0600 or 0400" if uid == 0 else (
        f"uid {uid}'s, mode 0600 or 0400, or root's in the daemon's group, "
        "mode 0640 or 0440")
    assert lines == [f"configuration file {path} holds a secret ({held}) and "
                     f"is readable by group or others (mode 0644): make it "
                     f"{owner}"]


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


# -- a daemon run as a non-root uid (the controller role's Deployment) -------
DAEMON, OTHER = 65532, 65534


@pytest.mark.privileged
@pytest.mark.parametrize("uid,gid,mode,problem", [
    (0, DAEMON, 0o440, ""),            # a Secret with fsGroup: the kubelet's
    (0, DAEMON, 0o640, ""),            # root:fsGroup, group-readable
    (DAEMON, DAEMON, 0o600, ""),       # its own, private
    (DAEMON, DAEMON, 0o400, ""),
    (DAEMON, DAEMON, 0o640, "is readable by group or others (mode 0640)"),
    (0, OTHER, 0o440, "is readable by group or others (mode 0440)"),
    (0, DAEMON, 0o444, "is readable by group or others (mode 0444)"),
    (OTHER, OTHER, 0o600, f"is owned by uid {OTHER}, not root or uid {DAEMON}"),
])
def test_what_a_non_root_daemon_takes_as_private(
        tmp_path: Path, uid: int, gid: int, mode: int, problem: str) -> None:
    """PostgreSQL's rule for its key file: its own file readable by it
    alone, or root's readable by its group alone besides root. Another
    group's, or anyone's, or another user's file is named."""
    path = write(tmp_path / "k.conf", KEYSTONE, mode)
    os.chown(path, uid, gid)
    lines = conf_mod.secret_file_warnings(
        loaded(["--config-file", str(path)]), euid=DAEMON, groups={DAEMON})
    if not problem:
        assert lines == []
        return
    (line,) = lines
    assert line == (f"configuration file {path} holds a secret (password) "
                    f"and {problem}: make it uid {DAEMON}'s, mode 0600 or "
                    "0400, or root's in the daemon's group, mode 0640 or 0440")


@pytest.mark.privileged
def test_the_root_daemon_keeps_its_rule(tmp_path: Path) -> None:
    """Group-readable stays a warning for a root daemon (the CNI role),
    whatever the group: root needs no group to read a file."""
    path = write(tmp_path / "k.conf", KEYSTONE, 0o440)
    os.chown(path, 0, 0)
    (line,) = conf_mod.secret_file_warnings(
        loaded(["--config-file", str(path)]), euid=0, groups={0})
    assert "is readable by group or others (mode 0440): make it root's" in line
