"""The installed Python shim answers exactly as ``shim.py`` run as a script,
through its bytecode (a matching python3) and through its source (any other,
forced here by a build for another cache tag): stdout, stderr and exit
status, against a real daemon, a missing one and the runtime's mistakes."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kuryr_supervisor.cni import install, ownership, shimbuild
from tests.functional.cni_harness import (
    HOST_PATH,
    Daemon,
    Namespaces,
    running_daemon,
    unique,
)

pytestmark = pytest.mark.privileged


@pytest.fixture
def shims(tmp_path: Path) -> dict[str, str]:
    """Today's script, the installed file, and one built for another Python."""
    text = Path(install.SHIM_SOURCE).read_text(encoding="utf-8")
    body = "\n" + text.partition("\n")[2]
    forms = {
        "script": f"#!{sys.executable} -IS\n" + text.partition("\n")[2],
        "bytecode": shimbuild.loader(body, f"#!{sys.executable} -IS"),
        "source": shimbuild.loader(body, f"#!{sys.executable} -IS",
                                   tag="cpython-0"),
    }
    paths = {}
    for name, script in forms.items():
        path = tmp_path / name / "kuryr-cni"
        path.parent.mkdir()
        path.write_bytes(ownership.mark_python_shim(script.encode()))
        path.chmod(0o755)
        paths[name] = str(path)
    return paths


def call(path: str, env: dict[str, Any], stdin: str) -> tuple[int, str, str]:
    done = subprocess.run([path], input=stdin.encode(), capture_output=True,
                          env={"PATH": HOST_PATH, **env}, timeout=60,
                          check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def same_everywhere(shims: dict[str, str], env: dict[str, Any],
                    stdin: str = "") -> tuple[int, str, str]:
    answers = {name: call(path, env, stdin) for name, path in shims.items()}
    assert answers["bytecode"] == answers["script"] == answers["source"], answers
    return answers["script"]


ADD = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1",
       "CNI_NETNS": "/proc/self/ns/net", "CNI_IFNAME": "eth0"}
LOCAL = [
    ({"CNI_COMMAND": "VERSION"}, ""),
    ({"CNI_COMMAND": "VERSION"}, '{"cniVersion": "0.4.0"}'),
    ({"CNI_COMMAND": "VERSION"}, "not json"),
    (ADD, "[1, 2"),
    (ADD, '{"cniVersion": "1.0.0", "timeout": -1}'),
    (ADD, '{"cniVersion": "1.0.0", "daemon_socket": 1}'),
    ({**ADD, "CNI_CONTAINERID": b"\xff\xfe"}, '{"cniVersion": "1.0.0"}'),
]


@pytest.mark.parametrize(("env", "stdin"), LOCAL)
def test_local_answers(shims: dict[str, str], env: dict[str, Any],
                       stdin: str) -> None:
    status, out, _ = same_everywhere(shims, env, stdin)
    assert out or status == 0


def test_a_daemon_that_is_not_there(shims: dict[str, str],
                                    tmp_path: Path) -> None:
    conf = json.dumps({"cniVersion": "1.0.0", "timeout": 0.4,
                       "daemon_socket": f"unix://{tmp_path}/none.sock"})
    answers = {}
    for name, path in shims.items():
        status, out, err = call(path, {"CNI_COMMAND": "DEL",
                                       "CNI_CONTAINERID": "c1"}, conf)
        # the number of attempts within the deadline is the clock's
        answers[name] = (status, re.sub(r"\d+ attempts", "N attempts", out), err)
    assert answers["bytecode"] == answers["script"] == answers["source"]
    status, out, err = answers["script"]
    assert status == 1 and json.loads(out)["code"] == 11 and "retrying" in err


def test_add_check_del_against_a_real_daemon(shims: dict[str, str],
                                             tmp_path: Path,
                                             namespaces: Namespaces) -> None:
    with running_daemon(str(tmp_path / "daemon")) as daemon:
        shapes = {name: cycle(daemon, path, namespaces.create(), name)
                  for name, path in shims.items()}
        assert shapes["bytecode"] == shapes["script"] == shapes["source"]
        # one pod, each command through another form
        netns, cid = namespaces.create(), unique("cid-")
        env = {"CNI_CONTAINERID": cid, "CNI_NETNS": f"/var/run/netns/{netns}",
               "CNI_IFNAME": "eth0"}
        conf = json.dumps(daemon.netconf("1.0.0"))
        status, out, _ = call(shims["source"], {**env, "CNI_COMMAND": "ADD"}, conf)
        assert status == 0, out
        check = json.dumps({**daemon.netconf("1.0.0"),
                            "prevResult": json.loads(out)})
        assert call(shims["bytecode"], {**env, "CNI_COMMAND": "CHECK"},
                    check) == (0, "", "")
        assert call(shims["script"], {**env, "CNI_COMMAND": "DEL"},
                    conf) == (0, "", "")


def shape(value: Any) -> Any:
    """A result with its per-pod values (addresses, MACs, paths) blanked."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    return type(value).__name__


def cycle(daemon: Daemon, path: str, netns: str, name: str) -> Any:
    """ADD, CHECK, DEL, DEL of a fresh pod; the ADD result's shape."""
    env = {"CNI_CONTAINERID": unique("cid-"), "CNI_IFNAME": "eth0",
           "CNI_NETNS": f"/var/run/netns/{netns}"}
    conf = json.dumps(daemon.netconf("1.1.0"))
    status, out, err = call(path, {**env, "CNI_COMMAND": "ADD"}, conf)
    assert (status, err) == (0, ""), (name, out, err)
    result = json.loads(out)
    assert result["cniVersion"] == "1.1.0" and result["ips"], name
    assert out.endswith("}\n") and os.linesep == "\n"
    check = json.dumps({**daemon.netconf("1.1.0"), "prevResult": result})
    for command, stdin in (("CHECK", check), ("DEL", conf), ("DEL", conf)):
        assert call(path, {**env, "CNI_COMMAND": command}, stdin) == (0, "", ""), \
            (name, command)
    return shape(result)
