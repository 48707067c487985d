"""The shim's local answers (VERSION, undecodable input, no daemon)."""
from __future__ import annotations

import ast
import io
import json
from pathlib import Path

import pytest

from kuryr_supervisor.cni import shim

STDLIB_ONLY = {"__future__", "_json", "_socket", "collections", "json", "os",
               "socket", "sys", "time", "typing"}


def run(env: dict[str, str], stdin: str) -> tuple[int, dict]:
    out = io.StringIO()
    status = shim.main(stdin=io.StringIO(stdin), stdout=out, environ=env)
    return status, json.loads(out.getvalue())


def test_version_is_answered_locally() -> None:
    status, body = run({"CNI_COMMAND": "VERSION"}, '{"cniVersion": "0.4.0"}')
    assert status == 0 and body == {"cniVersion": "0.4.0",
                                    "supportedVersions": list(shim.SUPPORTED_VERSIONS)}
    status, body = run({"CNI_COMMAND": "VERSION"}, "garbage")
    assert status == 0 and body["cniVersion"] == "1.1.0"


def test_undecodable_netconf_is_code_6() -> None:
    status, body = run({"CNI_COMMAND": "ADD"}, "{not json")
    assert status == 1 and body["code"] == 6


def test_bad_timeout_is_code_7() -> None:
    status, body = run({"CNI_COMMAND": "ADD"},
                       json.dumps({"cniVersion": "1.0.0", "timeout": "soon"}))
    assert status == 1 and body["code"] == 7 and body["cniVersion"] == "1.0.0"


def test_unreachable_daemon_is_code_11(tmp_path: Path) -> None:
    conf = {"cniVersion": "1.0.0", "timeout": 0.2,
            "daemon_socket": f"unix://{tmp_path}/none.sock"}
    status, body = run({"CNI_COMMAND": "ADD"}, json.dumps(conf))
    assert status == 1 and body["code"] == 11 and body["cniVersion"] == "1.0.0"
    conf["daemon_socket"] = "127.0.0.1:1"
    assert run({"CNI_COMMAND": "DEL"}, json.dumps(conf))[1]["code"] == 11


def test_imports_only_the_standard_library() -> None:
    tree = ast.parse(Path(shim.__file__).read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add((node.module or "").split(".")[0])
    assert names <= STDLIB_ONLY, names - STDLIB_ONLY


def test_shebang() -> None:
    assert Path(shim.__file__).read_text().startswith("#!/usr/bin/env -S python3 -I -S\n")


def test_json_halves_agree_with_json() -> None:
    docs = ['{"a": [1, -2.5e3, "x\\u00e9\\n", null, true, false, {}]}',
            ' \n{"cniVersion": "1.0.0", "name": "k8s-pod-network"}\t', "[]",
            '"s"', "NaN"]
    for doc in docs:
        assert repr(shim._loads(doc)) == repr(json.loads(doc))
    for bad in ["{not json", '{"a": 1} x', "", '"\x01"', "{'a': 1}"]:
        try:
            shim._loads(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad!r}")
    obj = {"cniVersion": "1.0.0", "code": 11, "msg": "é \"q\"\n",
           "list": ["a", 1, None, True], "nested": {"k": "v"}}
    assert json.loads(shim._dumps(obj)) == obj
    assert shim._dumps(obj) == json.dumps(obj)


@pytest.mark.parametrize("timeout", ["1e308", "1" + "0" * 400, "-1", "0"])
def test_absurd_timeout_is_a_config_error(timeout: str) -> None:
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "a", "CNI_IFNAME": "eth0",
           "CNI_NETNS": "/x"}
    status, out = shim.run(env, '{"daemon_socket": "unix:///nope", '
                                f'"timeout": {timeout}}}')
    assert status == 1 and json.loads(out)["code"] == 7


def test_deeply_nested_netconf_is_a_decode_error() -> None:
    status, out = shim.run({"CNI_COMMAND": "ADD"}, "[" * 100000)
    assert status == 1 and json.loads(out)["code"] == 6
    assert shim.run({"CNI_COMMAND": "VERSION"}, "[" * 100000)[0] == 0
