"""The netlink liveness check: an injected probe, and the real one as root."""
from __future__ import annotations

import os

import pytest

from kuryr_supervisor.cni.netlink import NetlinkError
from kuryr_supervisor.health.checks.base import Kind, Sort
from kuryr_supervisor.health.checks.netlink import NetlinkCheck
from kuryr_supervisor.state import LiveCause


def test_probe_success() -> None:
    calls: list[int] = []
    result = NetlinkCheck(lambda: calls.append(1)).run(0.0)
    assert result.ok
    assert result.message.startswith("netlink usable (")
    assert calls == [1]


def test_probe_failure_is_reported_not_raised() -> None:
    def broken() -> None:
        raise NetlinkError("netlink unusable: [Errno 1] Operation not "
                           "permitted", 1)
    result = NetlinkCheck(broken).run(0.0)
    assert not result.ok
    assert result.message == ("netlink unusable: [Errno 1] Operation not "
                              "permitted")


def test_unexpected_exception_names_its_type() -> None:
    def broken() -> None:
        raise RuntimeError()
    result = NetlinkCheck(broken).run(0.0)
    assert not result.ok
    assert result.message == "RuntimeError"


def test_declares_its_cause() -> None:
    check = NetlinkCheck()
    assert (check.name, check.kind, check.sort, check.cause) == (
        "netlink", Kind.LIVENESS, Sort.IO, LiveCause.NETLINK)


@pytest.mark.privileged
def test_real_netlink_probe() -> None:
    assert os.geteuid() == 0
    result = NetlinkCheck().run(0.0)
    assert result.ok, result.message
