"""[node_port]: its options are checked before any worker starts (one
line naming the option: the daemon exits 78)."""
from __future__ import annotations

from pathlib import Path

import pytest

from kuryr_supervisor import conf as conf_mod
from tests.unit.test_conf_ovs import K8S, PODPORT, load


@pytest.mark.parametrize("line,needle", [
    ("service_cidr = 10.96.0.0/12", None),
    ("service_cidr = ", None),
    ("ifname = mgmt.0", None),
    ("service_cidr = 10.96.0.1/12", "[node_port] service_cidr"),   # a host
    ("service_cidr = 0.0.0.0/0", "[node_port] service_cidr"),
    ("service_cidr = 127.0.0.0/8", "[node_port] service_cidr"),
    ("service_cidr = fd00::/108", "[node_port] service_cidr"),
    ("service_cidr = nonsense", "[node_port] service_cidr"),
    ("ifname = a-name-far-too-long", "[node_port] ifname"),
    ("ifname = --all", "[node_port] ifname"),
    ("ifname = a b", "[node_port] ifname"),
    ("ifname = ..", "[node_port] ifname"),
    ("ifname = ksv0123456789ab", "[node_port] ifname"),   # GC's prefix
    ("enabled = perhaps", "[node_port] enabled"),
])
def test_node_port_options_are_checked(tmp_path: Path, line: str,
                                       needle: str | None) -> None:
    text = f"[binding]\ndriver = ovs\n[node_port]\n{line}\n{PODPORT}{K8S}"
    if needle is None:
        load(tmp_path, text)
        return
    with pytest.raises(conf_mod.ConfigError) as err:
        load(tmp_path, text)
    assert needle in str(err.value) and "\n" not in str(err.value)
