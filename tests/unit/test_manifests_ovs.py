"""The ``ovs`` kustomize component: the DaemonSet with the OVS binding,
the pod's port from its PodPort, and the node's OVSDB socket mounted where
the default ``[binding] ovsdb_connection`` looks for it."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_pkg
from kuryr_supervisor.conf import binding as binding_conf
from kuryr_supervisor.conf import cni_daemon
from tests.unit.test_manifests import by_kind, container, model, with_components

pytestmark = pytest.mark.manifests


def test_ovs_component(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = with_components(tmp_path, "ovs")
    for doc in docs:
        model(doc)
    c = container(docs)
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["OS_BINDING__DRIVER"] == "ovs"
    assert env["OS_CNI_DAEMON__ADDRESS_SOURCE"] == "podport"
    assert "OS_BINDING__DRIVER" not in {e["name"] for e in container()["env"]}
    # The canary's ICMP probes need a raw socket (tests/functional/
    # test_canary_probes.py proves it); the base grants none.
    assert sorted(c["securityContext"]["capabilities"]["add"]) == [
        "NET_ADMIN", "NET_RAW", "SYS_ADMIN"]
    assert "NET_RAW" not in container()["securityContext"]["capabilities"][
        "add"]

    default = next(o.default for o in binding_conf.OPTS
                   if o.name == "ovsdb_connection")
    sock_dir = os.path.dirname(default.removeprefix("unix:"))
    [mount] = [m for m in c["volumeMounts"] if m["name"] == "openvswitch"]
    assert mount["mountPath"] == sock_dir and not mount.get("readOnly")
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    [volume] = [v for v in ds["spec"]["template"]["spec"]["volumes"]
                if v["name"] == "openvswitch"]
    assert volume["hostPath"] == {"path": sock_dir, "type": "Directory"}

    # The shipped configuration with the component's environment is a
    # valid daemon configuration with the OVS binding and the wait for
    # ACTIVE on.
    for name, value in env.items():
        if name.startswith("OS_") and value is not None:
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("OS_KUBERNETES__API_ROOT", "https://10.0.0.1:443")
    conf = cfg.ConfigOpts()
    conf_pkg.register_opts(conf)
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as f:
        f.write(by_kind("ConfigMap")["data"]["kuryr-supervisor.conf"])
        f.flush()
        conf(["--config-file", f.name], default_config_files=[])
        conf_pkg.validate(conf)
    assert conf.binding.driver == "ovs"
    assert conf.cni_daemon.address_source == "podport"
    assert cni_daemon.wait_for_active(conf) is True
