"""The port data's format checks (shared by PodPorts) and the legacy
annotation: only a well-formed one for the pod's own UID is ever decoded,
and the daemon binds none."""
from __future__ import annotations

import ipaddress
import json

import pytest

from kuryr_supervisor.controller import handlers
from kuryr_supervisor.kubernetes.portdata import (
    LEGACY_ANNOTATION,
    PortData,
    from_pod,
)

GOOD = PortData("5c0e-port", "uid-1", "fa:16:3e:00:00:01",
                ipaddress.IPv4Interface("10.20.0.12/24"),
                ipaddress.IPv4Address("10.20.0.1"))


def pod(uid: str, text: str | None) -> dict[str, object]:
    notes = {} if text is None else {LEGACY_ANNOTATION: text}
    return {"metadata": {"uid": uid, "annotations": notes}}


def test_round_trip() -> None:
    assert PortData.parse(GOOD.to_json()) == GOOD
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
        PortData.parse(text)
    assert from_pod(pod("uid-1", text)) is None


def test_other_pods_annotation_is_ignored() -> None:
    assert from_pod(pod("uid-2", GOOD.to_json())) is None


def test_handlers_found_by_entry_point() -> None:
    [(name, factory)] = handlers.load(["neutron_port"])
    from kuryr_supervisor.controller.ports import assembly
    assert name == "neutron_port" and factory is assembly.build
    with pytest.raises(handlers.HandlerNotFound, match="nope"):
        handlers.load(["neutron_port", "nope"])
