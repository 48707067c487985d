"""The port annotation is hostile input: only a well-formed one for the
pod's own UID is ever bound."""
from __future__ import annotations

import ipaddress
import json

import pytest

from kuryr_supervisor.controller import handlers
from kuryr_supervisor.kubernetes.portannotation import (
    ANNOTATION,
    PortAnnotation,
    from_pod,
    reader,
)

GOOD = PortAnnotation("5c0e-port", "uid-1", "fa:16:3e:00:00:01",
                      ipaddress.IPv4Interface("10.20.0.12/24"),
                      ipaddress.IPv4Address("10.20.0.1"))


def pod(uid: str, text: str | None) -> dict[str, object]:
    notes = {} if text is None else {ANNOTATION: text}
    return {"metadata": {"uid": uid, "annotations": notes}}


def test_round_trip() -> None:
    assert PortAnnotation.parse(GOOD.to_json()) == GOOD
    assert from_pod(pod("uid-1", GOOD.to_json())) == GOOD


def with_field(**change: object) -> str:
    raw = json.loads(GOOD.to_json())
    raw.update(change)
    return json.dumps(raw)


@pytest.mark.parametrize("text", [
    "", "[]", "null", "{", "x" * 2000,
    with_field(mac="01:00:5e:00:00:01"),          # multicast MAC
    with_field(mac="fa:16:3e:00:00"),
    with_field(address="10.20.0.0/24"),           # network address
    with_field(address="10.20.0.255/24"),         # broadcast
    with_field(address="10.20.0.5/32"),
    with_field(address="127.0.0.5/8", gateway="127.0.0.1"),
    with_field(gateway="10.30.0.1"),              # outside the network
    with_field(gateway="10.20.0.12"),             # the address itself
    with_field(address=12),
    with_field(podUid="../../etc"),
    with_field(portId=""),
])
def test_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        PortAnnotation.parse(text)
    assert from_pod(pod("uid-1", text)) is None


def test_other_pods_annotation_is_ignored() -> None:
    assert from_pod(pod("uid-2", GOOD.to_json())) is None
    read = reader(lambda ns, name: pod("uid-1", GOOD.to_json()))
    assert read("default", "web", "uid-1") == GOOD
    assert read("default", "web", "uid-other") is None
    assert reader(lambda ns, name: None)("default", "web", "uid-1") is None


def test_handlers_found_by_entry_point() -> None:
    [(name, factory)] = handlers.load(["neutron_port"])
    assert name == "neutron_port" and factory.__name__ == "NeutronPortHandler"
    with pytest.raises(handlers.HandlerNotFound, match="nope"):
        handlers.load(["neutron_port", "nope"])


def test_waiter_sees_the_annotation_on_a_watch_without_polling() -> None:
    import threading
    import time

    from kuryr_supervisor.kubernetes.portannotation import waiter
    from tests.fixtures.fakeapi import FakeAPI
    api = FakeAPI().start()
    try:
        client = api.client()
        uid = api.add_pod("default", "web", "node-a")["metadata"]["uid"]
        note = PortAnnotation(GOOD.port_id, uid, GOOD.mac, GOOD.address,
                              GOOD.gateway)
        wait = waiter(client)
        assert wait("default", "web", uid, 0) is None        # not yet, no wait
        timer = threading.Timer(0.4, client.annotate_pod, args=(
            "default", "web", uid, {ANNOTATION: note.to_json()}))
        timer.start()
        started = time.monotonic()
        assert wait("default", "web", uid, 10) == note
        assert time.monotonic() - started < 2
        gets = [r for r in api.requests if r[1] == "GET"
                and r[2] == "/api/v1/namespaces/default/pods/web"]
        watches = api.requests_for("/api/v1/namespaces/default/pods",
                                   watch="true")
        assert len(gets) == 2 and len(watches) == 1     # one GET per call
        assert watches[0]["fieldSelector"] == "metadata.name=web"
        assert wait("default", "web", "another-uid", 0.5) is None
        assert wait("default", "ghost", "u", 5) is None   # no such pod: at once
        other = api.add_pod("default", "other", "node-a")["metadata"]["uid"]
        threading.Timer(0.3, api.delete_pod, args=("default", "other")).start()
        started = time.monotonic()
        assert wait("default", "other", other, 10) is None
        assert time.monotonic() - started < 2               # deleted: no wait
    finally:
        api.stop()
