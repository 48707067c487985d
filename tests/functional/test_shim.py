"""The kuryr-cni shim as the runtime runs it: copied alone, executed through
its shebang by the host's python3 (which cannot import kuryr_supervisor)."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.functional.cni_harness import (
    HOST_PATH,
    Namespaces,
    run_shim,
    running_daemon,
    unique,
)

pytestmark = pytest.mark.privileged


@pytest.fixture
def shim_path(tmp_path: Any, shim_factory: Callable[[str], str]) -> str:
    """Each test here runs against both shims (Python and Go)."""
    return shim_factory(str(tmp_path))


def conf(address: str, **extra: Any) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "kuryr", "type": "kuryr-cni",
            "daemon_socket": address, **extra}


def test_runs_alone_with_the_host_python(shim_path: str) -> None:
    done = subprocess.run(["/usr/bin/python3", "-c", "import kuryr_supervisor"],
                          capture_output=True, cwd="/", env={"PATH": HOST_PATH})
    assert done.returncode != 0          # the package is not importable here
    status, body = run_shim(shim_path, "VERSION", {"cniVersion": "0.4.0"})
    assert status == 0 and body["supportedVersions"][-1] == "1.1.0"


def test_daemon_not_running_is_code_11(shim_path: str, tmp_path: Any) -> None:
    """Once the deadline has passed (retries: test_shim_restart.py)."""
    started = time.monotonic()
    status, body = run_shim(shim_path, "ADD", conf(f"unix://{tmp_path}/no.sock",
                                                   timeout=0.5),
                            container_id="x1", netns="/proc/self/ns/net")
    assert status != 0 and body["code"] == 11 and body["cniVersion"] == "1.0.0"
    status, body = run_shim(shim_path, "DEL", conf("127.0.0.1:1", timeout=0.5),
                            container_id="x1")
    assert status != 0 and body["code"] == 11
    assert time.monotonic() - started < 5


def test_silent_daemon_is_code_11_within_the_timeout(shim_path: str,
                                                     tmp_path: Any) -> None:
    path = str(tmp_path / "mute.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)                   # accepts (kernel backlog), never answers
    try:
        started = time.monotonic()
        status, body = run_shim(shim_path, "ADD", conf(f"unix://{path}", timeout=1),
                                container_id="x1", netns="/proc/self/ns/net")
        elapsed = time.monotonic() - started
    finally:
        listener.close()
    assert status != 0 and body["code"] == 11
    assert 1 <= elapsed < 4


def test_trace_context_is_forwarded(shim_path: str, tmp_path: Any) -> None:
    path = str(tmp_path / "echo.sock")
    seen: list[bytes] = []
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            while len(body) < length:      # read it all: no RST on close
                body += conn.recv(65536)
            seen.append(head)
            conn.sendall(b"HTTP/1.0 204 No Content\r\n\r\n")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    status, body = run_shim(
        shim_path, "DEL", conf(f"unix://{path}"), container_id="x1",
        extra_env={"TRACEPARENT": "00-0af7651916cd43dd8448eb211c80319c-"
                                  "b7ad6b7169203331-01"})
    thread.join(5)
    listener.close()
    assert (status, body) == (0, None)
    assert b"traceparent: 00-0af7651916cd43dd8448eb211c80319c" in seen[0].lower()


@pytest.fixture
def open_tmp() -> Iterator[str]:
    """A temporary directory every user can traverse (pytest's is 0700)."""
    path = tempfile.mkdtemp(prefix="ksvc-", dir="/tmp")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_socket_is_root_only(open_tmp: str, namespaces: Namespaces) -> None:
    with running_daemon(open_tmp) as d:
        run_dir = os.path.dirname(d.socket_path)
        assert os.stat(d.socket_path).st_mode & 0o777 == 0o600
        assert os.stat(run_dir).st_mode & 0o777 == 0o700
        os.chmod(d.shim_path, 0o755)
        netconf = json.dumps(d.netconf())
        env = {"PATH": HOST_PATH, "CNI_COMMAND": "ADD", "CNI_IFNAME": "eth0",
               "CNI_CONTAINERID": unique("c", 20),
               "CNI_NETNS": f"/var/run/netns/{namespaces.create()}"}
        done = subprocess.run(["/usr/sbin/runuser", "-u", "nobody", "--", d.shim_path],
                              input=netconf, env=env, capture_output=True,
                              text=True, timeout=30)
        assert done.returncode != 0
        assert json.loads(done.stdout)["code"] == 11      # cannot connect
        # even with the directory opened up, the 0600 socket refuses nobody
        os.chmod(run_dir, 0o755)
        probe = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
                 f"try:\n s.connect({d.socket_path!r})\nexcept PermissionError:"
                 "\n sys.exit(3)\nsys.exit(0)")
        done = subprocess.run(["/usr/sbin/runuser", "-u", "nobody", "--", "/usr/bin/python3",
                               "-c", probe], capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 3, done.stderr
        assert d.ipam.list() == [] and d.state.cni_failures() == 0


def test_stale_socket_is_replaced_and_live_one_kept(tmp_path: Any) -> None:
    from kuryr_supervisor.cni.sockets import AddressInUse, bind_unix

    path = tmp_path / "run" / "cni.sock"
    path.parent.mkdir()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()                        # a socket file nobody listens on
    live = bind_unix(str(path))
    try:
        with pytest.raises(AddressInUse):
            bind_unix(str(path))
    finally:
        live.close()
    os.unlink(path)
    path.write_text("not a socket")
    with pytest.raises(AddressInUse):
        bind_unix(str(path))
    assert path.read_text() == "not a socket"


def test_tcp_bind_for_kuryr_compatibility(shim_path: str) -> None:
    from kuryr_supervisor.cni.serving import CNIServer

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("204 No Content", [])
        return []

    from kuryr_supervisor.cni.sockets import listen

    with listen("127.0.0.1:0") as listener:
        server = CNIServer(listener, app, state=None)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        status, body = run_shim(shim_path, "DEL",
                                conf(f"127.0.0.1:{port}"), container_id="x1")
        assert (status, body) == (0, None)
    finally:
        server.stop_accepting()
        thread.join(5)
