"""Tenancy, from a hostile tenant's side: nothing a pod's owner writes
steers a pod's address, and the CNI role binds only what fits its own
configuration. A real CNI daemon (and, where named, the controller role)
against the Kubernetes, Keystone and Neutron fakes over real HTTP, the
shim run as a runtime runs it, real network namespaces; the node's bridge
addresses and routes are compared (``ip -j``) before and after."""
from __future__ import annotations

import ipaddress
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.controller import Cloud, controller_daemon, start_cloud
from tests.fixtures.daemon import Daemon, wait_until
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.tenant import annotate, forged, node_view, podport, spec_for
from tests.functional.cni_harness import Namespaces, install_shim, run_shim

pytestmark = pytest.mark.privileged

NODE = "node-t"


def pod_args(pod: dict) -> str:  # type: ignore[type-arg]
    meta = pod["metadata"]
    return (f"K8S_POD_NAMESPACE={meta['namespace']};K8S_POD_NAME={meta['name']};"
            f"K8S_POD_UID={meta['uid']}")


def cni_daemon(workdir: Path, api_url: str, subnet: ipaddress.IPv4Network,
               timeout: float = 1.0) -> Daemon:
    workdir.mkdir(parents=True, exist_ok=True)
    return Daemon(workdir, {
        "kubernetes": {"api_root": api_url, "node_name": NODE,
                       "request_timeout": 1.0, "watch_timeout": 5,
                       "api_check_interval": 0.2, "api_check_timeout": 0.5},
        "cni_daemon": {"address_source": "podport",
                       "annotation_timeout": timeout},
        "ipam": {"subnet": str(subnet),
                 "gateway": str(subnet.network_address + 1)}})


def netconf(d: Daemon) -> dict[str, str]:
    return {"cniVersion": "1.0.0", "name": "kuryr", "type": "kuryr-cni",
            "daemon_socket": f"unix://{d.socket_path}"}


@pytest.fixture
def subnet() -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(
        f"10.{random.randrange(150, 199)}.{random.randrange(256)}.0/24")


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    api = FakeAPI().start()
    api.add_node(NODE)
    yield api
    api.stop()


def test_forged_data_refused_node_unchanged(tmp_path: Path, api: FakeAPI,
                                            subnet: ipaddress.IPv4Network,
                                            namespaces: Namespaces) -> None:
    cni = cni_daemon(tmp_path / "cni", api.url, subnet)
    shim = install_shim(str(tmp_path))
    bridge = cni.options["binding"]["bridge"]
    try:
        cni.start()
        cni.wait_ready()
        victim = api.add_pod("default", "victim", NODE)
        victim_spec = spec_for(victim, subnet, 20)
        api.put_podport(podport(victim, victim_spec))
        ns = namespaces.create()
        code, result = run_shim(shim, "ADD", netconf(cni), container_id="c-victim",
                                netns=f"/var/run/netns/{ns}", args=pod_args(victim))
        assert code == 0, result
        assert result["ips"][0]["address"] == victim_spec["address"]
        before = node_view(bridge)
        assert (("inet", str(subnet.network_address + 1), 24)
                in before["addrs"]), before

        for i, (case, obj, want) in enumerate(
                forged(victim, victim_spec, api.add_pod("default", "probe", NODE),
                       subnet)):
            evil = api.add_pod("default", f"evil{i}", NODE)
            uid = evil["metadata"]["uid"]
            # rebuild the case for this pod (same forgery, this pod's UID)
            [(_, obj, want)] = [c for c in forged(victim, victim_spec, evil, subnet)
                                if c[0] == case]
            netns = f"/var/run/netns/{namespaces.create()}"
            # 1. as a tenant writes it: the pod's annotation is never read
            annotate(api, evil, obj["spec"])
            code, err = run_shim(shim, "ADD", netconf(cni),
                                 container_id=f"a-{i}", netns=netns,
                                 args=pod_args(evil))
            assert code != 0 and err["code"] == 11, (case, err)
            # 2. as a PodPort (the controller's own resource): re-checked
            api.put_podport(obj)
            code, err = run_shim(shim, "ADD", netconf(cni),
                                 container_id=f"p-{i}", netns=netns,
                                 args=pod_args(evil))
            assert code != 0 and err["code"] == want, (case, err)
            assert node_view(bridge) == before, case
            assert uid
        status = cni.status()
        assert status["cniFailures"] == 0
        assert cni.probe("/alive") == 200 and cni.probe("/ready") == 200
        log = cni.log_path.read_text(errors="replace")    # all of it
        assert log.count("refused port for pod default/evil0 ") == 1, log[-2000:]
        # the victim's attachment is untouched
        code, _ = run_shim(shim, "CHECK", {**netconf(cni), "prevResult": result},
                           container_id="c-victim", netns=f"/var/run/netns/{ns}",
                           args=pod_args(victim))
        assert code == 0
    finally:
        cni.close()


@pytest.fixture
def cloud(subnet: ipaddress.IPv4Network) -> Iterator[Cloud]:
    cloud = start_cloud(cidr=str(subnet), gateway=str(subnet.network_address + 1))
    yield cloud
    cloud.stop()


def test_annotation_before_scheduling_ignored(tmp_path: Path, cloud: Cloud,
                                              subnet: ipaddress.IPv4Network,
                                              namespaces: Namespaces) -> None:
    """A tenant writes a valid-looking annotation on a pod before it is
    scheduled: the controller still creates a Neutron port (Neutron is
    the only proof), and the CNI binds the Neutron port's address, not
    the annotation's."""
    cloud.api.add_node(NODE)
    controller = controller_daemon(tmp_path / "controller", cloud)
    cni = cni_daemon(tmp_path / "cni", cloud.api.url, subnet, timeout=10.0)
    shim = install_shim(str(tmp_path))
    try:
        controller.start()
        cni.start()
        controller.wait_ready()
        cni.wait_ready()
        pod = cloud.api.add_pod("default", "early", "")
        uid = pod["metadata"]["uid"]
        forged_spec = spec_for(pod, subnet, 250)
        # Neutron draws at random: never this one, or the test proves nothing
        cloud.neutron.reserve(forged_spec["address"].split("/")[0])
        annotate(cloud.api, pod, forged_spec)
        pod["spec"]["nodeName"] = NODE          # now scheduled
        cloud.api.modify_pod("default", "early")
        spec = wait_until(lambda: cloud.podport("default", "early"), 15)
        [port] = cloud.neutron.ports_for(uid)
        assert spec["portId"] == port["id"] != forged_spec["portId"]
        assert spec["address"] != forged_spec["address"]
        code, result = run_shim(shim, "ADD", netconf(cni), container_id="c-early",
                                netns=f"/var/run/netns/{namespaces.create()}",
                                args=pod_args(pod))
        assert code == 0, result
        assert result["ips"][0]["address"] == spec["address"]
        assert controller.status()["handlerFailures"] == 0
    finally:
        cni.close()
        controller.close()
