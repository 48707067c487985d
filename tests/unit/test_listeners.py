"""The master's listeners: bound before the fork, taken from systemd, the
CNI socket file watched and handed over -- on real sockets. The CNI
socket's directory is trusted only when root's: those tests need root."""
from __future__ import annotations

import logging
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.cni import sockets
from kuryr_supervisor.master import activation, listeners
from kuryr_supervisor.state import Fault


@pytest.fixture
def conf(tmp_path: Path) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([])
    os.chmod(tmp_path, 0o755)
    conf.set_override("bind_address", f"unix://{tmp_path}/run/cni.sock",
                      "cni_daemon")
    conf.set_override("port", 0, group="cni_health_server")
    conf.set_override("port", 0, group="metrics")
    return conf


@pytest.fixture
def opened(conf: cfg.ConfigOpts) -> Iterator[listeners.Listeners]:
    got = listeners.open_all(conf)
    yield got
    got.close()


def accepts(listener: socket.socket, path: str) -> bool:
    """A client connecting to ``path`` lands in ``listener``'s backlog."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(path)
        listener.settimeout(2)
        conn, _ = listener.accept()
        conn.close()
    return True


@pytest.mark.privileged
def test_binds_every_listener_with_the_trust_rules(
        opened: listeners.Listeners, tmp_path: Path) -> None:
    path = f"{tmp_path}/run/cni.sock"
    assert opened.cni_path == path and opened.cni is not None
    st = os.stat(path)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert accepts(opened.cni, path)
    assert opened.probe.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    assert opened.metrics is None               # [metrics] port = 0: off
    assert opened.activated == ()


@pytest.mark.privileged
def test_a_taken_metrics_port_leaves_the_probes_up(
        conf: cfg.ConfigOpts, caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        conf.set_override("port", taken.getsockname()[1], group="metrics")
        with caplog.at_level(logging.ERROR):
            got = listeners.open_all(conf)
        try:
            assert got.metrics is None and got.probe is not None
            port = taken.getsockname()[1]
            assert f"metrics listener 127.0.0.1:{port} cannot bind" \
                in caplog.text
            assert "/metrics stays on the probe port" in caplog.text
            assert f"held by pid {os.getpid()} " in caplog.text
        finally:
            got.close()


@pytest.mark.privileged
def test_a_taken_probe_port_names_its_holder(conf: cfg.ConfigOpts) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        conf.set_override("port", taken.getsockname()[1],
                          group="cni_health_server")
        with pytest.raises(listeners.ListenerError) as err:
            listeners.open_all(conf)
        assert f"held by pid {os.getpid()} " in str(err.value)
        assert f", uid {os.getuid()}" in str(err.value)


@pytest.mark.privileged
def test_deleted_socket_is_rebound_onto_the_same_descriptor(
        opened: listeners.Listeners) -> None:
    """The master's descriptor number stays (workers forked later inherit
    the new socket); the running Server is told, then handed the socket."""
    assert opened.cni is not None and opened.handoff is not None
    path, fd = opened.cni_path, opened.cni.fileno()
    assert path is not None and opened.watch()
    os.unlink(path)
    assert opened.watch()                       # bound again at once
    assert opened.cni.fileno() == fd
    assert accepts(opened.cni, path)
    notices = opened.handoff.receive()
    assert [n.lost for n in notices] == [True, False]
    fresh = notices[1].sock
    assert fresh is not None
    with fresh:
        assert accepts(fresh, path)             # the very same socket


@pytest.mark.privileged
def test_a_file_in_the_way_is_never_removed(
        opened: listeners.Listeners) -> None:
    assert opened.cni_path is not None and opened.handoff is not None
    path = opened.cni_path
    os.unlink(path)
    Path(path).write_text("not a socket\n")
    assert not opened.watch() and not opened.watch()
    assert Path(path).read_text() == "not a socket\n"
    # Told once: deleted, then why it cannot be bound again.
    assert [n.fault for n in opened.handoff.receive()] == [
        Fault.SOCKET, Fault.SOCKET_BLOCKED]
    os.unlink(path)
    assert opened.watch()
    assert [n.lost for n in opened.handoff.receive()] == [False]


def ok_app(environ: dict[str, object], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Length", "2")])
    return [b"ok"]


@pytest.mark.privileged
def test_the_server_raises_and_clears_the_fault(
        opened: listeners.Listeners) -> None:
    """CNIServer applies the notices: the fault is written by the Server
    (its single writer), and a connection queued on the old socket is
    served before the swap."""
    import multiprocessing

    from kuryr_supervisor.cni.serving import CNIServer
    from kuryr_supervisor.state import SharedState
    assert opened.cni is not None and opened.cni_path is not None
    state = SharedState.create(multiprocessing.get_context("fork"))
    server = CNIServer(opened.cni, ok_app, state=state,
                       handoff=opened.handoff)
    queued = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        path = opened.cni_path
        queued.connect(path)                    # waits on the old socket
        queued.sendall(b"GET / HTTP/1.0\r\n\r\n")
        os.unlink(path)
        Path(path).write_text("x")
        opened.watch()
        server.take_notices()
        assert state.faults() == Fault.SOCKET_BLOCKED
        os.unlink(path)
        opened.watch()
        server.take_notices()
        assert not state.faults()
        queued.settimeout(10)
        assert queued.recv(100).startswith(b"HTTP/1.0 200")
        assert accepts(server.socket, path)     # the Server's own copy
    finally:
        queued.close()
        server.stop_accepting()


def test_activation_only_for_this_process() -> None:
    env = {"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "1"}
    assert activation.peek(env) == []
    assert activation.take(env) == [] and "LISTEN_FDS" not in env


def test_passed_sockets_are_matched_by_name_then_address(
        conf: cfg.ConfigOpts) -> None:
    probe = activation.Passed(3, "", socket.AF_INET, ("127.0.0.1", 9),
                              True)
    conf.set_override("port", 9, group="cni_health_server")
    assert listeners.match(probe, conf) == listeners.PROBES
    path, _ = sockets.parse_address(conf.cni_daemon.bind_address)
    named = activation.Passed(4, "cni", socket.AF_UNIX, path, True)
    assert listeners.match(named, conf) == listeners.CNI
    wrong = activation.Passed(4, "cni", socket.AF_UNIX, "/elsewhere", True)
    with pytest.raises(listeners.ListenerError, match="/elsewhere"):
        listeners.match(wrong, conf)
    other = activation.Passed(5, "x", socket.AF_INET, ("127.0.0.1", 1), True)
    assert listeners.match(other, conf) is None


@pytest.mark.privileged
def test_an_address_not_on_this_host_is_a_configuration_error(
        conf: cfg.ConfigOpts) -> None:
    conf.set_override("host", "192.0.2.1", group="cni_health_server")
    with pytest.raises(listeners.ListenerError) as err:
        listeners.open_all(conf)
    assert "probes listener" in str(err.value)
    assert "held by" not in str(err.value)      # not in use: not available


@pytest.mark.privileged
def test_our_own_socket_file_back_clears_the_fault(
        opened: listeners.Listeners) -> None:
    """Moved away while something blocked the path, then put back: the
    same inode is ours (a bound socket keeps its inode), nothing is bound
    again and the Server is told the fault is gone."""
    assert opened.cni is not None and opened.handoff is not None
    path = opened.cni_path
    assert path is not None
    os.rename(path, path + ".aside")
    Path(path).write_text("in the way\n")
    assert not opened.watch()
    os.unlink(path)
    os.rename(path + ".aside", path)
    assert opened.watch()
    notices = opened.handoff.receive()
    assert [n.fault for n in notices] == [Fault.SOCKET, Fault.SOCKET_BLOCKED,
                                          Fault.NONE]
    assert all(n.sock is None for n in notices)
    assert accepts(opened.cni, path)            # the very same socket


@pytest.mark.privileged
def test_an_untrusted_directory_is_named_until_restored(
        opened: listeners.Listeners) -> None:
    assert opened.handoff is not None and opened.cni_path is not None
    directory = os.path.dirname(opened.cni_path)
    os.chmod(directory, 0o777)
    try:
        assert not opened.watch() and not opened.watch()
    finally:
        os.chmod(directory, 0o700)
    assert opened.watch()
    assert [n.fault for n in opened.handoff.receive()] == [
        Fault.SOCKET_UNTRUSTED, Fault.NONE]


@pytest.mark.privileged
def test_a_replaced_socket_is_shut_down(opened: listeners.Listeners) -> None:
    """A copy of the old socket held by a worker forked earlier refuses
    connections once its file is put back at the path: stale, replaced."""
    assert opened.cni is not None and opened.cni_path is not None
    path = opened.cni_path
    inherited = opened.cni.dup()                # what a worker holds
    try:
        os.rename(path, path + ".old")
        assert opened.watch()                   # a new socket at the path
        os.replace(path + ".old", path)          # the old file put back
        assert sockets.is_stale(path)
        assert opened.watch()                   # replaced at once
        assert accepts(opened.cni, path)
    finally:
        inherited.close()


def test_listen_fds_beyond_the_descriptor_limit_is_refused() -> None:
    """Not walked: LISTEN_FDS=999999999 looked at every descriptor number
    (hours of CPU) before the daemon started."""
    env = {"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "999999999"}
    with pytest.raises(activation.ListenerError,
                       match="LISTEN_FDS=999999999 is more than"):
        activation.peek(env)
    env["LISTEN_FDS"] = "64"
    with pytest.raises(activation.ListenerError, match="allows 61 "):
        activation.peek(env, limit=64)
    env["LISTEN_FDS"] = "61"                    # at the limit: walked
    assert all(p.fd < 64 for p in activation.peek(env, limit=64))
    assert activation.fd_limit() > activation.FIRST_FD


@pytest.mark.privileged
def test_a_socket_removed_while_it_was_bound_again_is_bound_again(
        opened: listeners.Listeners, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file removed between the rename into place and the master's
    look at it: its identity is the one taken before the rename, so the
    missing file is never mistaken for ours (it was, and stayed missing)."""
    assert opened.cni_path is not None
    path = opened.cni_path
    real = sockets.bind_unix_file

    def bind_then_lose(where: str) -> Any:
        got = real(where)
        os.unlink(where)                    # a cleanup script, right then
        return got
    os.unlink(path)
    monkeypatch.setattr(sockets, "bind_unix_file", bind_then_lose)
    assert opened.watch()
    monkeypatch.setattr(sockets, "bind_unix_file", real)
    assert not os.path.exists(path)
    assert opened.watch() and os.path.exists(path)
    assert opened.cni is not None and accepts(opened.cni, path)
