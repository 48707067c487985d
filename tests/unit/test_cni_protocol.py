"""Request validation and per-version results, without sockets or netlink."""
from __future__ import annotations

import ipaddress
import os
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuryr_supervisor import errors
from kuryr_supervisor.cni import protocol, results, shim

NETNS = "/proc/self/ns/net"     # a real network namespace file


def body(command: str = "ADD", version: str = "1.1.0",
         **env: str | None) -> dict[str, Any]:
    base: dict[str, str | None] = {"CNI_COMMAND": command, "CNI_CONTAINERID": "abc123",
            "CNI_IFNAME": "eth0", "CNI_NETNS": NETNS, "CNI_PATH": "/opt/cni/bin"}
    base.update(env)
    return {"env": {k: v for k, v in base.items() if v is not None},
            "config": {"cniVersion": version, "name": "kuryr",
                       "type": "kuryr-cni"}}


def code_of(payload: Any) -> int:
    with pytest.raises(errors.CNIError) as info:
        protocol.parse(payload)
    return info.value.wire.code


def test_valid_add_is_parsed() -> None:
    req = protocol.parse(body(CNI_ARGS="K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;"
                                       "K8S_POD_UID=u;IgnoreUnknown=1"))
    assert (req.command, req.container_id, req.ifname, req.netns) == (
        "ADD", "abc123", "eth0", NETNS)
    assert req.pod is not None and (req.pod.namespace, req.pod.name,
                                    req.pod.uid) == ("ns", "p", "u")


def test_no_pod_without_k8s_args() -> None:
    assert protocol.parse(body()).pod is None


@pytest.mark.parametrize("payload, code", [
    ([], 6),
    ({"env": "x", "config": {}}, 6),
    ({"env": {"CNI_COMMAND": 1}, "config": {}}, 6),
    ({"env": {"CNI_COMMAND": "ADD"}, "config": []}, 6),
    (body(command="FROB"), 4),
    (body(command=""), 4),
    (body(CNI_CONTAINERID=None), 4),
    (body(CNI_IFNAME=None), 4),
    (body(CNI_NETNS=None), 4),
    (body(version="0.2.0"), 1),
    (body(version="9.9.9"), 1),
    (body(command="CHECK", version="0.3.1"), 1),
    (body(command="GC", version="1.0.0"), 1),
    (body(command="STATUS", version="0.4.0"), 1),
    (body(command="CHECK"), 7),              # no prevResult
    (body(CNI_NETNS="/nonexistent/netns"), 3),
    (body(CNI_NETNS="relative/path"), 4),
    (body(CNI_NETNS="/etc/hostname"), 4),     # exists, not a namespace
    (body(CNI_NETNS="/proc/self/ns/mnt"), 4),  # a namespace, not a net one
    (body(CNI_ARGS="novalue"), 4),
])
def test_rejections_carry_spec_codes(payload: Any, code: int) -> None:
    assert code_of(payload) == code


@pytest.mark.parametrize("cid", ["", "-abc", ".abc", "_a", "a/b", "a b", "a:b",
                                 "../x", "a\x00b", "é", "a" * 251])
def test_bad_container_ids(cid: str) -> None:
    assert code_of(body(CNI_CONTAINERID=cid)) == 4


@pytest.mark.parametrize("cid", ["a", "0", "a.b-c_d", "A" * 250,
                                 "3f6940ab5ab43bc522569d15b23f8c1b"])
def test_good_container_ids(cid: str) -> None:
    assert protocol.parse(body(CNI_CONTAINERID=cid)).container_id == cid


@pytest.mark.parametrize("ifname", ["", ".", "..", "a/b", "a:b", "a b", "a\tb",
                                    "x" * 16, "eth\x00"])
def test_bad_ifnames(ifname: str) -> None:
    assert code_of(body(CNI_IFNAME=ifname)) == 4


def test_fifteen_char_ifname_is_fine() -> None:
    assert protocol.parse(body(CNI_IFNAME="x" * 15)).ifname == "x" * 15


def test_del_tolerates_missing_netns() -> None:
    assert protocol.parse(body("DEL", CNI_NETNS="/gone/away")).netns == "/gone/away"
    assert protocol.parse(body("DEL", CNI_NETNS=None)).netns == ""


def test_bad_network_name_is_invalid_config() -> None:
    payload = body()
    payload["config"]["name"] = "bad name"
    assert code_of(payload) == 7


def test_gc_attachments_both_keys() -> None:
    payload = body("GC")
    payload["config"]["cni.dev/valid-attachments"] = [
        {"containerID": "a", "ifname": "eth0"}]
    assert protocol.parse(payload).valid_attachments == {
        protocol.Attachment("a", "eth0")}
    old = body("GC")
    old["config"]["cni.dev/attachments"] = [{"containerID": "b", "ifname": "e"}]
    assert protocol.parse(old).valid_attachments == {protocol.Attachment("b", "e")}
    bad = body("GC")
    bad["config"]["cni.dev/valid-attachments"] = [{"containerID": 1}]
    assert code_of(bad) == 7


def test_version_never_fails() -> None:
    assert protocol.version_answer({"cniVersion": "0.1.0"}) == {
        "cniVersion": "1.1.0", "supportedVersions": list(
            protocol.SUPPORTED_VERSIONS)}
    assert protocol.parse(body("VERSION", version="0.4.0")).cni_version == "0.4.0"


def test_shim_keeps_the_same_versions() -> None:
    assert shim.SUPPORTED_VERSIONS == protocol.SUPPORTED_VERSIONS


def _result(version: str, prev: dict[str, Any] | None = None) -> dict[str, Any]:
    payload = body(version=version)
    payload["config"]["dns"] = {"nameservers": ["10.0.0.10"], "junk": 1}
    if prev is not None:
        payload["config"]["prevResult"] = prev
    req = protocol.parse(payload)
    return results.add_result(
        req, host_ifname="ksv0123456789ab", host_mac="02:00:00:00:00:01",
        pod_mac="02:00:00:00:00:02", mtu=1400,
        address=ipaddress.IPv4Interface("10.1.0.5/24"),
        gateway=ipaddress.IPv4Address("10.1.0.1"))


@pytest.mark.parametrize("version", protocol.SUPPORTED_VERSIONS)
def test_result_shape_per_version(version: str) -> None:
    res = _result(version)
    assert res["cniVersion"] == version
    (ip,) = res["ips"]
    assert ip["address"] == "10.1.0.5/24" and ip["gateway"] == "10.1.0.1"
    assert res["interfaces"][ip["interface"]] == {
        "name": "eth0", "mac": "02:00:00:00:00:02", "sandbox": NETNS,
        **({"mtu": 1400} if version == "1.1.0" else {})}
    assert ("version" in ip) == (version in ("0.3.1", "0.4.0"))
    assert "sandbox" not in res["interfaces"][0]
    assert res["routes"] == [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}]
    assert res["dns"] == {"nameservers": ["10.0.0.10"]}


def test_result_appends_to_prev_result() -> None:
    prev = {"cniVersion": "1.0.0", "interfaces": [{"name": "x"}],
            "ips": [{"address": "10.9.0.2/24", "interface": 0}]}
    res = _result("1.0.0", prev)
    assert [i["name"] for i in res["interfaces"]] == [
        "x", "ksv0123456789ab", "eth0"]
    assert res["ips"][1]["interface"] == 2


def test_expected_address_from_prev_result() -> None:
    res = _result("1.0.0")
    payload = body("CHECK", version="1.0.0")
    payload["config"]["prevResult"] = res
    req = protocol.parse(payload)
    assert results.expected_address(req) == ipaddress.IPv4Interface("10.1.0.5/24")
    payload["config"]["prevResult"] = {"interfaces": [], "ips": []}
    with pytest.raises(errors.CheckFailed):
        results.expected_address(protocol.parse(payload))


def test_is_netns() -> None:
    assert protocol.is_netns(NETNS)
    assert not protocol.is_netns("/etc/hostname")
    assert not protocol.is_netns("/nope")
    assert not protocol.is_netns(os.devnull)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=20)


@given(st.one_of(
    _json,
    st.fixed_dictionaries({"env": st.dictionaries(
        st.sampled_from(["CNI_COMMAND", "CNI_CONTAINERID", "CNI_IFNAME",
                         "CNI_NETNS", "CNI_ARGS"]),
        st.text(max_size=20)), "config": _json})))
def test_any_input_is_a_request_or_a_cni_error(payload: Any) -> None:
    try:
        protocol.parse(payload)
    except errors.CNIError as exc:
        assert exc.wire.code in (1, 2, 3, 4, 6, 7)


def test_is_netns_answers_false_for_a_nul_byte() -> None:
    from kuryr_supervisor.cni import protocol as proto
    assert proto.is_netns("/a\x00b") is False
