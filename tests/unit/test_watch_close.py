"""Closing a watch, against the fake API over real HTTP with the installed
urllib3: mid-stream from another thread, after the server ended it, twice,
before it was read, or after its reader gave it up. Each is quiet (no
record with a traceback, nothing at WARNING or above: with ``debug`` on,
oslo.log prints a traceback's lines at ERROR) and leaves the pool sound:
a connection read to its end is reused, any other is closed first."""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kuryr_supervisor.kubernetes import client as k8s
from tests.fixtures.fakeapi import FakeAPI, kubernetes_conf


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    fake.add_node("node-a", pod_cidr="10.0.3.0/24")
    yield fake
    fake.stop()


@pytest.fixture
def quiet(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Fails the test on a record with a traceback or at WARNING and up."""
    caplog.set_level(logging.DEBUG)
    yield
    loud = [f"{r.levelname} {r.name}: {r.getMessage()}"
            for r in caplog.get_records("call")
            if r.exc_info or r.levelno >= logging.WARNING]
    assert not loud, loud


def client_for(api: FakeAPI, watch_timeout: int) -> k8s.K8sClient:
    conf = kubernetes_conf(api_root=api.url, node_name="node-a",
                           watch_timeout=watch_timeout)
    return k8s.K8sClient.from_conf(conf, environ={})


def pooled(client: k8s.K8sClient) -> list[Any]:
    """The idle connections of the client's pool."""
    return [c for c in list(client._pool.pool.queue) if c is not None]  # type: ignore[union-attr]


def test_close_after_the_server_ended_the_watch(api: FakeAPI, quiet: None) -> None:
    """The usual end: timeoutSeconds passed, the stream was read to its
    end and its connection went back to the pool; the caller's close()
    that follows does nothing, and the connection serves the next call."""
    client = client_for(api, watch_timeout=1)
    rv = client.node_pods.list()[1]
    api.add_pod("ns", "p", "node-a")
    stream = client.node_pods.watch(rv)
    conn = stream._response.connection
    assert [e.type for e in stream] == ["ADDED"]
    stream.close()
    stream.close()
    assert conn in pooled(client) and conn.sock is not None
    assert client.node_pods.list()[0] and conn in pooled(client)


def test_close_mid_stream_from_another_thread(api: FakeAPI, quiet: None) -> None:
    """The reader, blocked on a silent watch, wakes and ends without an
    error; its connection, half read, is closed, never pooled."""
    client = client_for(api, watch_timeout=30)
    rv = client.node_pods.list()[1]
    for _ in range(5):
        stream = client.node_pods.watch(rv)
        conn = stream._response.connection
        got: list[Any] = []
        reader = threading.Thread(
            target=lambda s=stream, out=got: out.append(list(s)))
        reader.start()
        time.sleep(0.2)
        started = time.monotonic()
        stream.close()
        reader.join(5)
        assert not reader.is_alive() and got == [[]]
        assert time.monotonic() - started < 5
        assert conn.sock is None     # closed: a slot the pool reconnects
        stream.close()
    api.add_pod("ns", "p", "node-a")
    assert [p.name for p in client.node_pods.list()[0]] == ["p"]


def test_close_while_events_are_arriving(api: FakeAPI, quiet: None) -> None:
    """Closed while the server is still writing: however the read ends
    (EOF, a broken chunk), the reader stops quietly."""
    client = client_for(api, watch_timeout=30)
    rv = client.node_pods.list()[1]
    stop = threading.Event()

    def churn() -> None:
        i = 0
        while not stop.is_set():
            api.add_pod("ns", f"c{i}", "node-a")
            i += 1
            time.sleep(0.002)
    writer = threading.Thread(target=churn)
    writer.start()
    try:
        for _ in range(5):
            stream = client.node_pods.watch(rv)
            errors: list[BaseException] = []

            def read(s: Any = stream, out: list[BaseException] = errors
                     ) -> None:
                try:
                    for _event in s:
                        pass
                except BaseException as exc:  # noqa: BLE001 - the test's finding
                    out.append(exc)
            reader = threading.Thread(target=read)
            reader.start()
            time.sleep(0.1)
            stream.close()
            reader.join(5)
            assert not reader.is_alive() and errors == []
    finally:
        stop.set()
        writer.join()
    assert client.node_pods.list()[0]


def test_close_after_its_reader_gave_up(api: FakeAPI, quiet: None) -> None:
    """A reader that stops at the event it wanted (the PodPort waiter),
    then closes: the rest of the response is never read, so the
    connection is closed rather than pooled."""
    client = client_for(api, watch_timeout=30)
    rv = client.node_pods.list()[1]
    api.add_pod("ns", "a", "node-a")
    api.add_pod("ns", "b", "node-a")
    stream = client.node_pods.watch(rv)
    conn = stream._response.connection
    for event in stream:
        assert event.obj is not None and event.obj.name == "a"
        break
    stream.close()
    assert conn.sock is None     # closed: a slot the pool reconnects
    assert len(client.node_pods.list()[0]) == 2


def test_close_before_reading(api: FakeAPI, quiet: None) -> None:
    """Given up before its first read (the watch loop stopping while the
    request was answered): closed, and reading it then brings nothing."""
    client = client_for(api, watch_timeout=30)
    stream = client.node_pods.watch(client.node_pods.list()[1])
    conn = stream._response.connection
    stream.close()
    assert list(stream) == []
    assert conn.sock is None     # closed: a slot the pool reconnects
    stream.close()
