"""The command line explains itself: ``--help`` lists the subcommands with
one line each before any option, subcommands and options come in any
order, each subcommand's ``--help`` shows its own flags only, a mistyped
word gets the closest subcommand, and a configuration path that is not a
regular file is refused in one line instead of hanging (real processes)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.daemon import Daemon, free_port

ENTRY = [sys.executable, "-m", "kuryr_supervisor.daemon"]


def cli(*args: str | Path, timeout: float = 60
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ENTRY, *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_help_lists_the_subcommands_first() -> None:
    done = cli("--help")
    assert done.returncode == 0 and done.stderr == ""
    lines = done.stdout.splitlines()
    assert len(lines) < 40, done.stdout            # not oslo's 70 lines
    start = lines.index("subcommands:")
    assert lines[start + 1].split()[0] == "status"
    assert lines[start + 2].split()[0] == "check-config"
    assert all(len(line) <= 79 for line in lines)
    assert "--log-date-format" not in done.stdout   # behind --help-all
    assert "--help-all" in done.stdout
    assert cli("-h").stdout == done.stdout
    full = cli("--help-all")
    assert full.returncode == 0 and "--log-date-format" in full.stdout


@pytest.mark.parametrize("name,own,absent", [
    ("status", "--json", "--nojson"),
    ("check-config", "--strict", "--nostrict")])
def test_subcommand_help_is_its_own(name: str, own: str, absent: str) -> None:
    for args in ((name, "--help"), ("--help", name), (name, "-h")):
        done = cli(*args)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"usage: kuryr-supervisor {name}")
        assert own in done.stdout and absent not in done.stdout
        assert "--log-date-format" not in done.stdout
        assert "--config-file" in done.stdout     # named in the epilog


@pytest.mark.privileged
def test_options_and_subcommand_in_any_order(tmp_path: Path) -> None:
    d = Daemon(tmp_path)
    for args in (("--role", "cni", "check-config", "--config-file", d.config),
                 ("check-config", "--role", "cni", "--config-file", d.config),
                 ("--config-file", d.config, "check-config", "--strict"),
                 ("--config-file", d.config, "--check-config")):
        done = cli(*args)
        assert (done.returncode, done.stdout) == (0, "ok\n"), (args, done)
    # The role before the subcommand is the subcommand's: the controller
    # role's own rule answers, not "unrecognized arguments".
    done = cli("--role", "controller", "check-config", "--config-file",
               d.config)
    assert done.returncode == 78 and "unrecognized" not in done.stderr
    assert "role controller needs the Kubernetes API" in done.stderr
    # A value equal to a subcommand's name is a value: a config file
    # named "status" is read, and the daemon is not asked for its status.
    status_file = tmp_path / "status"
    status_file.write_text(d.config.read_text())
    done = subprocess.run([*ENTRY, "check-config", "--config-file", "status"],
                          capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, check=False)
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr


def test_a_mistyped_subcommand_names_the_closest() -> None:
    done = cli("stauts", "--config-file", "/nonexistent")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "did you mean `kuryr-supervisor status`?" in done.stderr
    assert "--help" in done.stderr


@pytest.mark.parametrize("kind", ["fifo", "directory", "dev-zero",
                                  "dir-with-fifo"])
@pytest.mark.parametrize("command", ["check-config", "status", "daemon"])
def test_a_config_path_that_is_not_a_file(tmp_path: Path, kind: str,
                                          command: str) -> None:
    """One line, exit 78 (status: 2, not reachable either way), at once:
    never a hang on the FIFO or /dev/zero, never a traceback."""
    flag = "--config-file"
    if kind == "fifo":
        path = tmp_path / "fifo.conf"
        os.mkfifo(path)
    elif kind == "directory":
        path = tmp_path
    elif kind == "dev-zero":
        path = Path("/dev/zero")
    else:
        flag, path = "--config-dir", tmp_path / "conf.d"
        path.mkdir()
        os.mkfifo(path / "10-fifo.conf")
    args = [flag, path] if command == "daemon" else [command, flag, path]
    done = cli(*args, timeout=20)
    assert done.returncode == (2 if command == "status" else 78), done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "not a regular file" in done.stderr and str(path) in done.stderr


@pytest.mark.parametrize("data, offset, problem", [
    (b"[DEFAULT]\n# caf\xe9\n", 15, "byte 15 (0xe9) is not UTF-8"),
    (b"\xef\xbb\xbf[DEFAULT]\nrole = cni\n", 0,
     "starts with a UTF-8 byte order mark (bytes 0-2)")])
@pytest.mark.parametrize("command", ["check-config", "status", "daemon"])
def test_a_config_file_that_is_not_utf8(tmp_path: Path, data: bytes,
                                        offset: int, problem: str,
                                        command: str) -> None:
    """One line naming the file and the byte, exit 78 (status: 2, not
    reachable either way), never oslo.config's traceback; a byte order
    mark is refused as clearly (oslo.config would read it as text)."""
    path = tmp_path / "k.conf"
    path.write_bytes(data)
    args = ["--config-file", path]
    done = cli(*(args if command == "daemon" else [command, *args]))
    assert done.returncode == (2 if command == "status" else 78), done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"--config-file {path}: {problem}" in done.stderr
    assert f"byte {offset}" in done.stderr or f"bytes {offset}-" in done.stderr


def test_unknown_options_and_groups_are_named(tmp_path: Path) -> None:
    conf = tmp_path / "k.conf"
    conf.write_text(
        f"[DEFAULT]\nrole = cni\ndebug = false\n"
        f"[cni_health_server]\nport = {free_port()}\n"
        f"[supervisor]\nmax_restart = 2\nrestart_window = 60\n"
        f"[supervisr]\nmax_restarts = 2\n"
        f"[ipam]\nstate_dir = {tmp_path / 'state'}\n")
    done = cli("check-config", "--config-file", conf)
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr
    lines = done.stderr.splitlines()
    assert lines == [
        f"kuryr-supervisor: warning: {conf}: unknown option [supervisor] "
        "max_restart: did you mean `max_restarts`?",
        f"kuryr-supervisor: warning: {conf}: unknown group [supervisr]: "
        "did you mean `supervisor`?"], done.stderr
    strict = cli("check-config", "--strict", "--config-file", conf)
    assert strict.returncode == 78 and strict.stdout == ""
    assert strict.stderr.count("configuration error") == 2
    # Known options (oslo.log's too) pass quietly.
    conf.write_text(f"[DEFAULT]\ndebug = true\n[cni_health_server]\nport = "
                    f"{free_port()}\n[ipam]\nstate_dir = {tmp_path / 's'}\n")
    clean = cli("check-config", "--strict", "--config-file", conf)
    assert (clean.returncode, clean.stdout, clean.stderr) == (0, "ok\n", "")


@pytest.mark.privileged
def test_a_readable_secret_is_warned_about_as_the_daemon_does(
        tmp_path: Path) -> None:
    d = Daemon(tmp_path, {"neutron": {
        "auth_type": "password", "auth_url": "http://127.0.0.1:1/v3",
        "username": "kuryr", "password": "s3cret"}})
    d.config.chmod(0o644)
    done = cli("check-config", "--strict", "--config-file", d.config)
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr
    assert done.stderr.splitlines() == [
        f"kuryr-supervisor: warning: configuration file {d.config} holds a "
        "secret (password) and is readable by group or others (mode 0644)"
        + done.stderr.split("(mode 0644)", 1)[1].splitlines()[0]]
    d.config.chmod(0o600)
    done = cli("check-config", "--strict", "--config-file", d.config)
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")


@pytest.mark.privileged
def test_the_daemon_warns_of_unknown_names_at_start(tmp_path: Path) -> None:
    """A typo in ``[cni_health_server]`` would leave the probes on the
    default port without a word: the daemon logs each unknown option and
    group at start, one line each with the closest name, the very lines
    ``check-config`` prints."""
    d = Daemon(tmp_path, {"cni_health_server": {"prot": free_port()},
                          "supervisr": {"max_restarts": 2}})
    expected = [
        f"{d.config}: unknown option [cni_health_server] prot: did you mean "
        "`port`?",
        f"{d.config}: unknown group [supervisr]: did you mean `supervisor`?"]
    checked = cli("check-config", "--config-file", d.config)
    assert checked.stderr.splitlines() == [
        f"kuryr-supervisor: warning: {line}" for line in expected], checked
    try:
        d.start()
        d.wait_ready()
        logged = [line for line in d.log().splitlines() if "unknown " in line]
        assert len(logged) == 2, d.log()
        for line, want in zip(logged, expected, strict=True):
            assert " WARNING " in line and line.endswith(want), line
    finally:
        d.close()
