"""The memory check against fixture trees of /proc and cgroup v1/v2/hybrid."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from oslo_config import cfg

from kuryr_supervisor import conf as conf_mod
from kuryr_supervisor.health import processes
from kuryr_supervisor.health.checks.memory import DaemonMemory, MemoryCheck, MiB

FIXTURES = Path(__file__).parent.parent / "fixtures"
PROC = str(FIXTURES / "proc")
CGROUP = FIXTURES / "cgroup"


def tree(total: int = 7 * MiB, count: int = 3):
    """A stand-in for the USS sum, recording which pid was asked for."""
    asked: list[int] = []

    def tree_uss(pid: int) -> processes.TreeMemory | None:
        asked.append(pid)
        return processes.TreeMemory(total, count) if total >= 0 else None
    tree_uss.asked = asked  # type: ignore[attr-defined]
    return tree_uss


def meter(pid: int, root: str, uss=None) -> DaemonMemory:
    return DaemonMemory(pid, proc_root=PROC, cgroup_root=str(CGROUP / root),
                        tree_uss=uss or tree())


def test_cgroup_v2_memory_current() -> None:
    reading = meter(1001, "v2").read()
    assert reading is not None
    assert reading.bytes == 222298112
    path = CGROUP / "v2" / "kubepods" / "pod1" / "memory.current"
    assert reading.source == f"cgroup v2 {path}"


def test_hybrid_uses_the_unified_mount() -> None:
    reading = meter(1008, "hybrid").read()
    assert reading is not None
    assert reading.bytes == 100 * MiB
    assert "unified/system.slice/kuryr.service/memory.current" in reading.source


def test_cgroup_v1_prefers_memsw() -> None:
    reading = meter(1002, "v1").read()
    assert reading is not None
    assert reading.bytes == 300 * MiB
    assert reading.source.endswith("pod2/memory.memsw.usage_in_bytes")
    assert reading.source.startswith("cgroup v1 ")


def test_cgroup_v1_without_swap_accounting() -> None:
    reading = meter(1003, "v1").read()
    assert reading is not None
    assert reading.bytes == 150 * MiB
    assert reading.source.endswith("nomemsw/memory.usage_in_bytes")


def test_unreadable_memsw_falls_to_usage() -> None:
    # memory.memsw.usage_in_bytes is a directory in this fixture.
    reading = meter(1006, "v1").read()
    assert reading is not None
    assert reading.bytes == 70 * MiB


@pytest.mark.parametrize("pid,root", [(1004, "v1"), (1010, "v2")])
def test_root_cgroup_is_never_used(pid: int, root: str) -> None:
    # Both fixture roots hold a host-wide usage file that must be ignored.
    uss = tree(9 * MiB, 4)
    reading = meter(pid, root, uss).read()
    assert reading is not None
    assert reading.bytes == 9 * MiB
    assert reading.source == f"USS of 4 processes under pid {pid}"
    assert uss.asked == [pid]  # type: ignore[attr-defined]


@pytest.mark.parametrize("pid,root", [
    (1005, "v2"),    # cgroup directories that do not exist
    (1005, "v1"),
    (1009, "v2"),    # no /proc/<pid>/cgroup at all
    (1007, "v1"),    # a usage file holding garbage
    (1001, "v1"),    # a v2 path but no cgroup2 mount under this root
])
def test_missing_or_bad_files_fall_back_to_uss(pid: int, root: str) -> None:
    reading = meter(pid, root).read()
    assert reading is not None
    assert reading.source.startswith("USS of 3 processes")


def test_cg_path_wins_and_falls_back_when_missing() -> None:
    m = meter(1001, "v2")
    custom = m.read(str(CGROUP / "custom"))
    assert custom is not None
    assert custom.bytes == 50 * MiB
    assert custom.source.startswith("cg_path ")
    missing = m.read(str(CGROUP / "nowhere"))
    assert missing is not None
    assert missing.source.startswith("cgroup v2 ")


def test_nothing_measurable_is_none() -> None:
    assert meter(1004, "v1", tree(-1)).read() is None


def make_conf(**overrides: object) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf_mod.register_opts(conf)
    conf([])
    for name, value in overrides.items():
        conf.set_override(name, value, group="cni_health_server")
    return conf


def test_check_limit_and_message() -> None:
    conf = make_conf(max_memory_usage=256)
    check = MemoryCheck(conf, meter(1001, "v2"))
    result = check.run(0.0)
    assert result.ok
    assert result.value == 222298112
    path = CGROUP / "v2" / "kubepods" / "pod1" / "memory.current"
    assert result.message == f"212 MiB of 256 MiB (cgroup v2 {path})"
    conf.set_override("max_memory_usage", 200, group="cni_health_server")
    result = check.run(0.0)   # re-read on each run: SIGHUP applies at once
    assert not result.ok
    assert result.message.startswith("memory over limit: 212 MiB of 200 MiB")


def test_check_disabled_still_measures() -> None:
    result = MemoryCheck(make_conf(), meter(1002, "v1")).run(0.0)
    assert result.ok
    assert result.value == 300 * MiB
    assert "no limit" in result.message


def test_check_reads_cg_path_option() -> None:
    conf = make_conf(max_memory_usage=10, cg_path=str(CGROUP / "custom"))
    result = MemoryCheck(conf, meter(1001, "v2")).run(0.0)
    assert not result.ok
    assert "cg_path" in result.message


def test_check_passes_when_unmeasurable() -> None:
    result = MemoryCheck(make_conf(max_memory_usage=1),
                         meter(1004, "v1", tree(-1))).run(0.0)
    assert result.ok
    assert "cannot be measured" in result.message


def test_real_uss_of_a_process_tree() -> None:
    child = subprocess.Popen([sys.executable, "-c",
                              "import time; time.sleep(30)"])
    try:
        own = processes.uss(os.getpid())
        assert own is not None and own > 0
        total = processes.tree_uss(os.getpid())
        assert total is not None
        assert total.processes >= 2
        assert total.uss > own
    finally:
        child.kill()
        child.wait()


def test_real_uss_of_a_vanished_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert processes.uss(child.pid) is None
    assert processes.tree_uss(child.pid) is None


def test_real_meter_on_this_machine() -> None:
    reading = DaemonMemory(os.getpid()).read()
    assert reading is not None
    assert reading.bytes > 0
    assert reading.source.split()[0] in ("cgroup", "USS")
