"""Addresses from the controller: waiting, recording, refusing."""
from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from kuryr_supervisor import errors
from kuryr_supervisor.cni.ipam import IpamStore, PodRef, validation
from kuryr_supervisor.cni.ipam.external import ExternalIpam, FixedAddress

POD = PodRef("default", "web", "uid-1")
FIXED = FixedAddress(ipaddress.IPv4Interface("10.20.0.12/24"),
                     ipaddress.IPv4Address("10.20.0.1"), "fa:16:3e:00:00:01",
                     pod_uid="uid-1", port_id="p1")


def store(tmp_path: Path) -> IpamStore:
    return IpamStore(str(tmp_path / "ipam.sqlite"),
                     ipaddress.IPv4Network("10.20.0.0/24"))


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


def forged(**change: object) -> FixedAddress:
    import dataclasses
    values: dict[str, object] = {}
    for key, value in change.items():
        if key == "address":
            value = ipaddress.IPv4Interface(str(value))
        if key == "gateway":
            value = ipaddress.IPv4Address(str(value))
        values[key] = value
    return dataclasses.replace(FIXED, **values)  # type: ignore[arg-type]


@pytest.mark.parametrize(("fixed", "code", "reason"), [
    (forged(address="10.20.0.1/24"), 7, "gateway address"),
    (forged(address="10.20.0.12/30"), 7, "another prefix"),
    (forged(address="10.20.0.12/16"), 7, "another prefix"),
    (forged(address="10.21.0.12/24", gateway="10.21.0.1"), 7, "outside"),
    (forged(address="10.20.0.12/0"), 7, "another prefix"),
    (forged(address="10.20.0.12/1"), 7, "another prefix"),
    (forged(address="169.254.169.254/24"), 7, "outside"),
    (forged(address="10.20.0.0/24"), 7, "network or broadcast"),
    (forged(address="10.20.0.255/24"), 7, "network or broadcast"),
    (forged(gateway="10.20.0.7"), 7, "not the configured gateway"),
    (forged(mac="00:00:00:00:00:00"), 7, "all zeros"),
    (forged(mac="01:00:5e:00:00:01"), 7, "multicast"),
    (forged(mac="nonsense"), 7, "malformed"),
    (forged(pod_uid="uid-2"), 4, "not for this pod"),
    (forged(pod_uid=""), 4, "not for this pod"),
])
def test_forged_port_refused_uncounted(tmp_path: Path, fixed: FixedAddress,
                                       code: int, reason: str,
                                       caplog: pytest.LogCaptureFixture) -> None:
    """Whatever the source says, the node's configuration decides: each
    forged case is refused with code 4 or 7 (not counted), logged once
    with the pod, and nothing is recorded."""
    ipam = ExternalIpam(store(tmp_path), lambda pod, s: fixed,
                        timeout=lambda: 1.0)
    with pytest.raises(errors.CNIError, match=reason) as info:
        ipam.allocate("c1", "eth0", netns="/run/netns/x", pod=POD)
    assert info.value.wire.code == code
    assert not info.value.wire.counts_as_failure
    assert ipam.list() == []
    refusals = [r for r in caplog.records if "refused port" in r.message]
    assert len(refusals) == 1 and "default/web" in refusals[0].message


def test_on_neutrons_data_plane_the_port_names_its_network(
        tmp_path: Path) -> None:
    """With the OVS binding (``network_from_port``) a port of the Neutron
    subnet, which [ipam] subnet (here another network) does not describe,
    is taken with its own prefix and gateway; the same data is refused
    by the bridge binding's rule. What is not a host of its own network,
    or is its own gateway, is still refused."""
    port = forged(address="10.40.0.118/24", gateway="10.40.0.1")
    bridge = ExternalIpam(store(tmp_path / "b"), lambda pod, s: port,
                          timeout=lambda: 1.0)
    with pytest.raises(errors.CNIError, match="outside the pod subnet"):
        bridge.allocate("c1", "eth0", netns="/run/netns/x", pod=POD)
    ovs = ExternalIpam(store(tmp_path), lambda pod, s: port,
                       timeout=lambda: 1.0, network_from_port=True)
    alloc = ovs.allocate("c1", "eth0", netns="/run/netns/x", pod=POD)
    assert (alloc.address, alloc.gateway) == (port.address, port.gateway)
    assert ovs.get("c1", "eth0").gateway == port.gateway  # type: ignore[union-attr]
    for bad, reason in ((forged(address="10.40.0.1/24", gateway="10.40.0.1"),
                         "gateway address"),
                        (forged(address="10.40.0.255/24",
                                gateway="10.40.0.1"), "broadcast")):
        refusing = ExternalIpam(store(tmp_path / reason), lambda p, s, b=bad: b,
                                timeout=lambda: 1.0, network_from_port=True)
        with pytest.raises(errors.CNIError, match=reason):
            refusing.allocate("c2", "eth0", netns="/run/netns/y", pod=POD)


def test_uid_from_the_api_when_cni_args_has_none(tmp_path: Path) -> None:
    """A runtime without K8S_POD_UID: the API's UID is the one held."""
    import dataclasses
    ipam = ExternalIpam(store(tmp_path), lambda pod, s: dataclasses.replace(
        FIXED, api_uid="uid-1"), timeout=lambda: 1.0)
    no_uid = PodRef("default", "web", "")
    assert ipam.allocate("c1", "eth0", netns="/n", pod=no_uid).address == \
        FIXED.address
    other = ExternalIpam(store(tmp_path / "x"), lambda pod, s: dataclasses.replace(
        FIXED, api_uid="uid-9"), timeout=lambda: 1.0)
    with pytest.raises(errors.InvalidEnvironment):
        other.allocate("c2", "eth0", netns="/n", pod=no_uid)


OTHER = PodRef("default", "db", "uid-9")


def test_a_mac_used_by_another_pod_is_refused(tmp_path: Path) -> None:
    """Another pod's attachment with the MAC (plumbed, or its ADD still in
    flight): code 7, not counted, nothing recorded or plumbed."""
    from kuryr_supervisor.cni.ipam import Plumbing
    theirs = forged(address="10.20.0.40/24", pod_uid="uid-9")
    ipam = ExternalIpam(store(tmp_path), lambda pod, s: theirs
                        if pod == OTHER else FIXED, timeout=lambda: 1.0,
                        links=dict)
    ipam.allocate("c9", "eth0", netns="/run/netns/o", pod=OTHER)
    with pytest.raises(errors.InvalidConfig,
                       match="an ADD in progress") as info:     # in flight
        ipam.allocate("c1", "eth0", netns="/run/netns/x", pod=POD)
    assert not info.value.wire.counts_as_failure
    ipam.plumbed("c9", "eth0", netconf="d", plumbing=Plumbing(
        "ksvh", "02:00:00:00:00:09", FIXED.mac.upper(), 1500))
    with pytest.raises(errors.InvalidConfig,
                       match="by pod default/db") as info:      # recorded
        ipam.allocate("c1", "eth0", netns="/run/netns/x", pod=POD)
    assert info.value.wire.code == 7
    assert [a.container_id for a in ipam.list()] == ["c9"]
    ipam.release("c9", "eth0")
    ipam.allocate("c1", "eth0", netns="/run/netns/x", pod=POD)   # free now


def test_the_bridge_mac_or_any_local_link_mac_is_refused(
        tmp_path: Path) -> None:
    net = tmp_path / "sys" / "class" / "net"
    for name, mac in (("lo", "00:00:00:00:00:00"), ("kuryr0", FIXED.mac),
                      ("eth0", "52:54:00:12:34:56")):
        (net / name).mkdir(parents=True)
        (net / name / "address").write_text(mac + "\n")
    links = validation.local_macs(str(net))
    assert links == {FIXED.mac: "link kuryr0",
                     "52:54:00:12:34:56": "link eth0"}
    ipam = ExternalIpam(store(tmp_path), lambda pod, s: FIXED,
                        timeout=lambda: 1.0, links=lambda: links)
    with pytest.raises(errors.InvalidConfig, match="by link kuryr0"):
        ipam.allocate("c1", "eth0", netns="/run/netns/x", pod=POD)
    assert ipam.list() == []
    with pytest.raises(errors.InvalidConfig, match="by link eth0"):
        validation.check_mac_free("52:54:00:12:34:56".upper(), links)


def test_local_links_are_read_from_this_namespace() -> None:
    import os
    real = validation.local_macs()
    for name in os.listdir("/sys/class/net"):
        with open(f"/sys/class/net/{name}/address") as f:
            mac = f.read().strip()
        if mac and mac != "00:00:00:00:00:00":
            assert mac in real


def test_a_plumbed_pod_is_told_to_the_source_once_bound(tmp_path: Path) -> None:
    """Once the interface is plumbed the source hears the pod is bound
    (the PodPort's status.boundAt); a failure to tell it fails no ADD."""
    from kuryr_supervisor.cni.ipam.records import Plumbing
    told: list[PodRef] = []
    ipam = ExternalIpam(store(tmp_path), lambda pod, s: FIXED,
                        timeout=lambda: 1.0, bound=told.append)
    ipam.allocate("c1", "eth0", netns="/run/netns/x", pod=POD)
    assert told == []                               # not plumbed yet
    facts = Plumbing(host_ifname="veth1", host_mac="fa:16:3e:00:00:02",
                     pod_mac="fa:16:3e:00:00:01", mtu=1500)
    ipam.plumbed("c1", "eth0", netconf="d", plumbing=facts)
    assert told == [POD]

    def refuse(pod: PodRef) -> None:
        raise RuntimeError("API down")
    other = tmp_path / "other"
    other.mkdir()
    failing = ExternalIpam(store(other), lambda pod, s: FIXED,
                           timeout=lambda: 1.0, bound=refuse)
    failing.allocate("c2", "eth0", netns="/run/netns/y", pod=POD)
    failing.plumbed("c2", "eth0", netconf="d", plumbing=facts)   # no raise
