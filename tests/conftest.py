"""Suite-wide rules.

Tests marked ``privileged`` need root (netns, netlink, real daemons); so do
tests marked ``realcloud`` (a real Keystone and Neutron, a private MariaDB:
tests/fixtures/realcloud), which count as privileged here. Without
root they are skipped, unless ``KURYR_SUPERVISOR_REQUIRE_PRIVILEGED=1`` (CI
sets it): then a privileged test that skips, for any reason, fails, so a CI
run can never pass without them.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Generator
from typing import Any

import pytest

pytest_plugins = ["tests.fixtures.netns", "tests.fixtures.clients",
                  "tests.fixtures.listener", "tests.fixtures.clouds",
                  "tests.fixtures.ovn.stack"]

REQUIRE = os.environ.get("KURYR_SUPERVISOR_REQUIRE_PRIVILEGED") == "1"
_ran: list[str] = []


def _privileged(item: pytest.Item) -> bool:
    return bool(item.get_closest_marker("privileged")
                or item.get_closest_marker("realcloud"))


def pytest_sessionstart(session: pytest.Session) -> None:
    """Namespaces an earlier run left when it was killed are deleted
    before any test makes its own (:mod:`tests.fixtures.netns`)."""
    from tests.fixtures.netns import sweep_leftovers  # a plugin: loaded late
    if os.geteuid() == 0:
        swept = sweep_leftovers()
        if swept:
            print(f"deleted {len(swept)} network namespaces left by "
                  f"killed test runs", file=sys.stderr)


def pytest_collection_modifyitems(config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    if os.geteuid() == 0 or REQUIRE:
        return
    skip = pytest.mark.skip(reason="needs root")
    for item in items:
        if _privileged(item):
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not _privileged(item):
        return
    if report.when == "call" and report.passed:
        _ran.append(item.nodeid)
    if REQUIRE and report.skipped:
        report.outcome = "failed"
        report.longrepr = (f"privileged test skipped where it must run: "
                           f"{report.longrepr}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.write_line(f"privileged tests passed: {len(_ran)}")
