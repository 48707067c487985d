"""Addresses from the controller: waiting, recording, refusing."""
from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from kuryr_supervisor import errors
from kuryr_supervisor.cni.ipam import IpamStore, PodRef
from kuryr_supervisor.cni.ipam.external import ExternalIpam, FixedAddress

POD = PodRef("default", "web", "uid-1")
FIXED = FixedAddress(ipaddress.IPv4Interface("10.20.0.12/24"),
                     ipaddress.IPv4Address("10.20.0.1"), "fa:16:3e:00:00:01")


def store(tmp_path: Path) -> IpamStore:
    return IpamStore(str(tmp_path / "ipam.sqlite"),
                     ipaddress.IPv4Network("10.99.0.0/24"))


def test_waits_for_the_address_then_records_it(tmp_path: Path) -> None:
    answers: list[FixedAddress | None | Exception] = [
        None, RuntimeError("API down"), None, FIXED]
    asked: list[PodRef] = []
    slept: list[float] = []

    def lookup(pod: PodRef, seconds: float) -> FixedAddress | None:
        assert 0 < seconds <= 30.0
        asked.append(pod)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer
    ipam = ExternalIpam(store(tmp_path), lookup, timeout=lambda: 30.0,
                        sleep=slept.append)
    alloc = ipam.allocate("c1", "eth0", netns="/run/netns/x", pod=POD)
    assert (alloc.address, alloc.gateway, alloc.mac) == (
        FIXED.address, FIXED.gateway, FIXED.mac)
    assert asked == [POD] * 4 and slept == [0.05, 0.1, 0.2]
    assert ipam.get("c1", "eth0").address == FIXED.address     # type: ignore[union-attr]
    with pytest.raises(errors.AlreadyExists):
        ipam.allocate("c1", "eth0", netns="/run/netns/x", pod=POD)
    # the same address for another container: refused, never held twice
    ipam2 = ExternalIpam(ipam.store, lambda pod, s: FIXED, timeout=lambda: 1.0)
    with pytest.raises(errors.AlreadyExists):
        ipam2.allocate("c2", "eth0", netns="/run/netns/y", pod=POD)
    assert ipam.release("c1", "eth0") is not None
    assert ipam.list() == []


def test_times_out_with_try_again(tmp_path: Path) -> None:
    ipam = ExternalIpam(store(tmp_path), lambda pod, s: None, timeout=lambda: 0.2)
    with pytest.raises(errors.TryAgain, match="no port address"):
        ipam.allocate("c1", "eth0", netns="/run/netns/x", pod=POD)
    assert ipam.list() == []


def test_needs_the_pod(tmp_path: Path) -> None:
    ipam = ExternalIpam(store(tmp_path), lambda pod, s: FIXED, timeout=lambda: 1.0)
    with pytest.raises(errors.InvalidEnvironment):
        ipam.allocate("c1", "eth0", netns="/run/netns/x", pod=PodRef("", "", ""))
