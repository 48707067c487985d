"""``status``'s pieces without a daemon: which shim is installed, the
summary of a /status document and the exit status it implies."""
from __future__ import annotations

import shutil
from pathlib import Path

from kuryr_supervisor import version
from kuryr_supervisor.cli import shim, status
from kuryr_supervisor.cni import install


def test_the_python_shim_this_package_installs(tmp_path: Path) -> None:
    path = install.install_shim(str(tmp_path), compiled=None)
    found = shim.inspect(path, compiled=None)
    assert (found.kind, found.version) == (shim.PYTHON, version.version())
    Path(path).write_bytes(Path(path).read_bytes() + b"# edited\n")
    other = shim.inspect(path, compiled=None)
    assert other.kind == shim.PYTHON and other.version is None
    assert "another build, sha256 " in other.describe()
    assert shim.inspect(str(tmp_path / "none")).kind == shim.ABSENT


def test_the_compiled_shim(tmp_path: Path, go_shim: Path) -> None:
    path = install.install_shim(str(tmp_path), compiled=str(go_shim))
    found = shim.inspect(path, compiled=str(go_shim))
    assert (found.kind, found.version) == (shim.COMPILED, version.version())
    assert shim.packaged_kind(str(go_shim)) == shim.COMPILED
    assert shim.packaged_kind(None) == shim.PYTHON
    elsewhere = tmp_path / "older"
    shutil.copy(go_shim, elsewhere)
    with open(elsewhere, "ab") as f:
        f.write(b"\0")
    assert shim.inspect(str(elsewhere), compiled=str(go_shim)).version is None


DOC = {
    "version": "9.9", "live": True, "ready": False, "draining": False,
    "summary": "live, not ready: watcher-synced: never listed", "cause": "none",
    "server": {"inflight": 1, "capacity": 64},
    "budgets": {"restarts": {"exhausted": False, "total": 2, "max": 5,
                             "window": 300.0},
                "cniFailures": {"count": 3, "limit": 3}},
    "components": {"server": {"state": "running", "pid": 42, "restarts": 2,
                              "reason": "killed", "exitCode": -9,
                              "heartbeatAge": 0.25, "memory": 10485760}},
    "checks": {"watcher-synced": {"kind": "readiness", "state": "failed",
                                  "message": "never listed",
                                  "since": "2026-01-01T00:00:00.000Z"},
               "netlink": {"kind": "liveness", "state": "ok", "message": ""}},
}


def test_render_and_exit_status() -> None:
    text = status.render(DOC, shim.ShimInfo("/opt/cni/bin/kuryr-cni",
                                            shim.COMPILED, "9.9"), shim.PYTHON)
    assert text.splitlines()[0] == "kuryr-supervisor 9.9: live, NOT READY"
    assert "pid 42" in text and "memory 10.0 MiB" in text
    assert "(last: killed, status -9)" in text
    assert "CNI failures   EXHAUSTED: 3 consecutive (limit 3)" in text
    assert "[-] watcher-synced (readiness, since 2026-01-01T00:00:00.000Z): " \
           "never listed" in text
    assert "netlink" not in text
    assert "Shim:     compiled (Go) 9.9 (/opt/cni/bin/kuryr-cni)" in text
    assert "Python shim only (for the compiled one" in text
    assert status.exit_status(DOC) == status.NOT_READY
    assert status.exit_status({**DOC, "ready": True}) == status.READY
    assert status.exit_status({**DOC, "live": False}) == status.NOT_LIVE


def canary_doc(**canary: object) -> dict[str, object]:
    base = {"up": True, "state": "up", "gateway": {"reached": True},
            "peers": [{"node": "b", "reached": True},
                      {"node": "c", "reached": True}]}
    checks = {**DOC["checks"], "ovn-controller": {  # type: ignore[dict-item]
        "state": "ok", "message": "ovn-controller connected to the "
        "Southbound database (tcp:10.0.0.1:6642)"}}
    return {**DOC, "checks": checks, "network": {
        "cniStatus": {"code": 0}, "canary": {**base, **canary}}}


def test_the_network_in_one_line() -> None:
    text = status.render(canary_doc())
    assert "  Network:  2/2 peers, gateway ok, ovn-controller connected" \
        in text
    doc = canary_doc(gateway={"reached": False}, peers=[
        {"node": "b", "reached": False}, {"node": "c", "reached": True}])
    doc["checks"]["ovn-controller"] = {  # type: ignore[index]
        "state": "failed", "message": "not connected"}
    doc["network"]["cniStatus"] = {"code": 50}  # type: ignore[index]
    assert status.network_line(doc) == (
        "1/2 peers, gateway UNREACHABLE, ovn-controller NOT CONNECTED, "
        "CNI STATUS 50")
    for excused, said in (("cluster-wide",
                           "CNI STATUS ok (cluster-wide fault)"),
                          ("held", "CNI STATUS held")):
        doc["network"]["cniStatus"] = {  # type: ignore[index]
            "code": 0, "excused": excused}
        assert status.network_line(doc).endswith(  # type: ignore[union-attr]
            "ovn-controller NOT CONNECTED, " + said)
    doc = canary_doc(up=False, state="port p1 not installed: ovn-controller "
                     "is not running")
    assert status.network_line(doc) == (
        "canary port p1 not installed: ovn-controller is not running, "
        "ovn-controller connected")
    assert status.network_line(DOC) is None          # the controller role
