"""The net-admin readiness check against a fixture /proc and the real one."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from kuryr_supervisor.health.checks.base import Kind, Sort
from kuryr_supervisor.health.checks.capabilities import (
    NetAdminCheck,
    effective_capabilities,
)

PROC = str(Path(__file__).parent.parent / "fixtures" / "proc")


def test_full_capabilities_pass() -> None:
    result = NetAdminCheck(lambda: 2001, proc_root=PROC).run(0.0)
    assert result.ok
    assert result.message == "CAP_NET_ADMIN effective (pid 2001)"


def test_missing_net_admin_fails_with_the_mask() -> None:
    # 0xa80425fb is Docker's default set: no bit 12.
    result = NetAdminCheck(lambda: 2002, proc_root=PROC).run(0.0)
    assert not result.ok
    assert result.message == ("CAP_NET_ADMIN missing from CapEff "
                              "00000000a80425fb (pid 2002)")


@pytest.mark.parametrize("pid", [2003, 4242])   # no CapEff line; no file
def test_unreadable_status_fails_without_raising(pid: int) -> None:
    result = NetAdminCheck(lambda: pid, proc_root=PROC).run(0.0)
    assert not result.ok
    assert result.message.startswith(f"cannot read capabilities of pid {pid}")


def test_pid_is_asked_each_run() -> None:
    pids = iter([2001, 2002])
    check = NetAdminCheck(lambda: next(pids), proc_root=PROC)
    assert check.run(0.0).ok
    assert not check.run(0.0).ok


def test_kind_and_sort() -> None:
    check = NetAdminCheck()
    assert (check.name, check.kind, check.sort) == (
        "net-admin", Kind.READINESS, Sort.IO)


def test_real_proc_agrees_with_euid() -> None:
    caps = effective_capabilities(os.getpid())
    result = NetAdminCheck().run(0.0)
    assert result.ok == bool(caps & (1 << 12))
    if os.geteuid() == 0:
        assert result.ok
