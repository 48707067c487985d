"""The node side of network health's composition root: one OVSDB connection
made and handed to every data-plane check, the bridge check alone with the
Linux bridge binding, and the judge's word (its ``network-verdict`` check)
only where a record is written."""
from __future__ import annotations

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.cni import ovsdb
from kuryr_supervisor.netcheck.node import assembly
from kuryr_supervisor.netcheck.node.verdict import NAME as VERDICT


@pytest.fixture(autouse=True)
def _no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


def conf_for(driver: str, **kubernetes: object) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override("driver", driver, "binding")
    for name, value in kubernetes.items():
        conf.set_override(name, value, "kubernetes")
    return conf


def test_one_ovsdb_connection_held_by_every_data_plane_check() -> None:
    node = assembly.build(conf_for("ovs"), master_pid=1)
    assert isinstance(node.db, ovsdb.Ovsdb)
    checks = node.checks()
    assert [c.name for c in checks] == ["ovsdb", "ovn-controller", "flows",
                                        "datapath"]
    held = {id(getattr(c, "db", None) or c._db) for c in checks}
    assert held == {id(node.db)}
    # Standalone: no record, so no judge is heard.
    assert node.view is None
    assert VERDICT not in [c.name for c in checks]


def test_the_linux_bridge_has_its_bridge_check_and_no_connection() -> None:
    node = assembly.build(conf_for("bridge"), master_pid=1)
    assert node.db is None
    assert [c.name for c in node.checks()] == ["bridge"]
    assert node.canary() is None


def test_the_judges_word_only_with_the_record() -> None:
    conf = conf_for("bridge", api_root="http://127.0.0.1:1",
                    node_name="node-a")
    node = assembly.build(conf, master_pid=1)
    assert node.view is not None and node.view.node == "node-a"
    assert [c.name for c in node.checks()] == ["bridge", VERDICT]
    conf.set_override("record", False, "network_health")
    assert assembly.build(conf, master_pid=1).view is None
