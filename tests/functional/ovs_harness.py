"""What the OVS binding's functional tests share: a private OVS (the
``ovs`` fixture: ``ovs = pytest.fixture(ovs_fixture)``), the CNI daemon in
Kubernetes mode on it, CNI_ARGS for a pod, and reading an Interface back
from OVSDB."""
from __future__ import annotations

import json
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.fixtures.controller import Cloud
from tests.fixtures.daemon import Daemon
from tests.fixtures.ovs import PrivateOVS

NODE = "node-ovs"
MTU = 1400


def ovs_fixture() -> Iterator[PrivateOVS]:
    """A private OVS for one test, closed after it."""
    switch = PrivateOVS().start()
    yield switch
    switch.close()


def cni_daemon(workdir: Path, cloud: Cloud, ovs: PrivateOVS,
               bridge: str) -> Daemon:
    workdir.mkdir(parents=True, exist_ok=True)
    return Daemon(workdir, {
        "kubernetes": {"api_root": cloud.api.url, "node_name": NODE,
                       "request_timeout": 1.0, "watch_timeout": 5,
                       "api_check_interval": 0.2, "api_check_timeout": 0.5,
                       "reclaim_interval": 0.5},
        "cni_daemon": {"address_source": "podport",
                       "annotation_timeout": 3.0},
        "ipam": {"subnet": cloud.neutron.subnet["cidr"],
                 "gateway": cloud.neutron.subnet["gateway_ip"]},
        "binding": {"driver": "ovs", "ovs_bridge": bridge, "mtu": MTU,
                    "ovsdb_connection": ovs.connection,
                    "ovsdb_timeout": 2.0},
    })


def pod_args(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return (f"K8S_POD_NAMESPACE={meta['namespace']};K8S_POD_NAME={meta['name']};"
            f"K8S_POD_UID={meta['uid']}")


def netconf(d: Daemon) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "kuryr", "type": "kuryr-cni",
            "daemon_socket": f"unix://{d.socket_path}"}


def in_netns(ns: str, script: str, timeout: float = 30
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, "python3", "-c",
                           textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=timeout, check=False)


def interface(ovs: PrivateOVS, name: str) -> dict[str, Any]:
    out = json.loads(ovs.vsctl("--format=json", "--columns=external_ids,mtu_request",
                               "find", "Interface", f"name={name}"))
    [row] = out["data"]
    return {"external_ids": dict(row[0][1]), "mtu_request": row[1]}
