"""Standalone Kubernetes: the controller role and the CNI role together,
against the Kubernetes API, Keystone and Neutron fakes; a pod gets its
Neutron port's address and MAC inside its network namespace.

Fake only: a pod subnet of its own per test, routed in the test's
namespaces (the real cloud's one subnet is shared by the session)."""
from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from tests.fixtures.controller import Cloud, controller_daemon, subnet_cloud_fixture
from tests.fixtures.daemon import Daemon, wait_until
from tests.functional.cni_harness import Namespaces, install_shim, ip_json, run_shim

pytestmark = pytest.mark.privileged

NODE = "node-cc"


cloud = pytest.fixture(subnet_cloud_fixture)


def cni_daemon(workdir: Path, cloud: Cloud) -> Daemon:
    workdir.mkdir(parents=True, exist_ok=True)
    return Daemon(workdir, {
        "kubernetes": {"api_root": cloud.api.url, "node_name": NODE,
                       "request_timeout": 1.0, "watch_timeout": 5,
                       "api_check_interval": 0.2, "api_check_timeout": 0.5},
        "cni_daemon": {"address_source": "podport",
                       "annotation_timeout": 2.0},
        # The node's own view of the pod network: what a PodPort must fit.
        "ipam": {"subnet": cloud.neutron.subnet["cidr"],
                 "gateway": cloud.neutron.subnet["gateway_ip"]},
    })


def pod_args(pod: dict) -> str:  # type: ignore[type-arg]
    meta = pod["metadata"]
    return (f"K8S_POD_NAMESPACE={meta['namespace']};K8S_POD_NAME={meta['name']};"
            f"K8S_POD_UID={meta['uid']}")


def netconf(d: Daemon) -> dict[str, str]:
    return {"cniVersion": "1.0.0", "name": "kuryr", "type": "kuryr-cni",
            "daemon_socket": f"unix://{d.socket_path}"}


def test_pod_gets_its_neutron_address(tmp_path: Path, cloud: Cloud,
                                      namespaces: Namespaces) -> None:
    cloud.api.add_node(NODE)
    controller = controller_daemon(tmp_path / "controller", cloud)
    cni = cni_daemon(tmp_path / "cni", cloud)
    shim = install_shim(str(tmp_path))
    try:
        controller.start()
        cni.start()
        controller.wait_ready()
        cni.wait_ready()
        pod = cloud.api.add_pod("default", "web", NODE)
        ns = namespaces.create()
        # ADD right away: the daemon waits for the controller's annotation.
        code, result = run_shim(shim, "ADD", netconf(cni), container_id="ctr-web",
                                netns=f"/var/run/netns/{ns}", args=pod_args(pod))
        assert code == 0, result
        [port] = cloud.neutron.ports_for(pod["metadata"]["uid"])
        want = ipaddress.IPv4Interface(
            f"{port['fixed_ips'][0]['ip_address']}/24")
        assert result["ips"][0]["address"] == str(want)
        assert result["ips"][0]["gateway"] == cloud.neutron.subnet["gateway_ip"]
        [link] = [i for i in ip_json("-n", ns, "addr", "show", "eth0")]
        assert link["address"] == port["mac_address"]
        assert {f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"]
                if a["family"] == "inet"} == {str(want)}
        routes = ip_json("-n", ns, "route", "show", "default")
        assert routes[0]["gateway"] == cloud.neutron.subnet["gateway_ip"]
        # the CNI role recorded that the pod holds its address: from now
        # on the controller never changes this PodPort
        status = cloud.api.podports[("default", "web")].get("status") or {}
        assert status.get("boundAt"), status

        # A pod the controller gives no port: code 11 after the timeout,
        # not counted against the failure budget.
        hn = cloud.api.add_pod("default", "hostnet", NODE, hostNetwork=True)
        other = namespaces.create()
        code, err = run_shim(shim, "ADD", netconf(cni), container_id="ctr-hn",
                             netns=f"/var/run/netns/{other}", args=pod_args(hn))
        assert code != 0 and err["code"] == 11, err
        assert cni.status()["cniFailures"] == 0

        # DEL, then the pod deleted: the port goes.
        code, _ = run_shim(shim, "DEL", netconf(cni), container_id="ctr-web",
                           netns=f"/var/run/netns/{ns}", args=pod_args(pod))
        assert code == 0
        cloud.api.delete_pod("default", "web")
        wait_until(lambda: not cloud.neutron.ports_for(pod["metadata"]["uid"]), 10)
    finally:
        cni.close()
        controller.close()
