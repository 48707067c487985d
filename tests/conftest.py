"""Suite-wide rules.

Tests marked ``privileged`` need root (netns, netlink, real daemons); so do
tests marked ``realcloud`` (a real Keystone and Neutron, a private MariaDB:
tests/fixtures/realcloud), which count as privileged here. Without
root they are skipped, unless ``KURYR_SUPERVISOR_REQUIRE_PRIVILEGED=1`` (CI
sets it): then a privileged test that skips, for any reason, fails, so a CI
run can never pass without them.

Every test is in exactly one tier (:data:`TIERS`, :func:`tier`); ``pytest
--tier NAME`` runs one (``tox -e NAME``), plain ``pytest`` (``tox``, CI)
runs them all. A test that needs root or a real cloud, or lives in
tests/functional, is ``functional``; else one marked ``build``, or using
a fixture that builds with Go (``go_shim``, ``cnitool``), is ``build``;
else one marked ``manifests`` is ``manifests``; the rest is ``unit``: it
needs no root, no network, no package index and no Go build, so it runs
as any user in a namespace with no network but loopback (``unshare -rn sh
-c 'ip link set lo up && ...'``).

Every tier serves and calls on loopback (fake APIs, probes, daemons): a
run where 127.0.0.1 cannot be reached (a new namespace's ``lo`` is down)
stops before the first test with one line saying so
(:func:`loopback_problem`), rather than failing test after test and
waiting out each one's deadline.

A run never outlives its tests by more than :data:`EXIT_GRACE` seconds:
a thread a test left running (an executor's job retrying against a fake
that is gone) would otherwise hold the interpreter's exit, which joins
them, until CI's own deadline. Past the grace the stacks of every thread
are printed and the run exits with status 3 (:func:`pytest_unconfigure`).
"""
from __future__ import annotations

import faulthandler
import os
import socket
import sys
import threading
import time
from collections.abc import Generator
from typing import Any

import pytest

pytest_plugins = ["tests.fixtures.netns", "tests.fixtures.clients",
                  "tests.fixtures.listener", "tests.fixtures.clouds",
                  "tests.fixtures.ovn.stack", "tests.fixtures.lbclouds"]

REQUIRE = os.environ.get("KURYR_SUPERVISOR_REQUIRE_PRIVILEGED") == "1"
#: Seconds the interpreter may take to exit once the run is over.
EXIT_GRACE = float(os.environ.get("KURYR_SUPERVISOR_TEST_EXIT_GRACE", "60"))
_ran: list[str] = []

#: The tiers, fastest first (doc/source/contributor/testing.rst says what
#: each needs; tox.ini has an environment of each name).
TIERS = ("unit", "build", "manifests", "functional")
#: Fixtures that build with Go: a test using one is in the build tier.
_GO_FIXTURES = frozenset({"go_shim", "cnitool"})
_FUNCTIONAL = os.path.join(os.path.dirname(__file__), "functional") + os.sep


def _privileged(item: pytest.Item) -> bool:
    return bool(item.get_closest_marker("privileged")
                or item.get_closest_marker("realcloud"))


def tier(item: pytest.Item) -> str:
    """The one tier ``item`` belongs to (module docstring)."""
    if _privileged(item) or str(item.path).startswith(_FUNCTIONAL):
        return "functional"
    if item.get_closest_marker("build") or \
            _GO_FIXTURES & set(getattr(item, "fixturenames", ())):
        return "build"
    if item.get_closest_marker("manifests"):
        return "manifests"
    return "unit"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--tier", choices=TIERS, default=None,
                     help="run only this tier's tests (default: every tier)")


def loopback_problem(host: str = "127.0.0.1", timeout: float = 2.0) -> str:
    """Why a client cannot connect to a server listening on ``host`` (the
    error), or "" when it can."""
    try:
        with socket.socket() as server:
            server.bind((host, 0))
            server.listen(1)
            with socket.create_connection(server.getsockname(),
                                          timeout=timeout):
                pass
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__
    return ""


def pytest_configure(config: pytest.Config) -> None:
    """A run without loopback stops here, one line, exit status 4 (module
    docstring); with xdist, the controller alone asks, before it starts
    the workers. Listing tests or options needs no loopback."""
    if config.option.collectonly or config.option.help or \
            hasattr(config, "workerinput"):
        return
    problem = loopback_problem()
    if problem:
        raise pytest.UsageError(
            f"loopback unusable: a connection to 127.0.0.1 failed "
            f"({problem}); the tests serve and call on it. Bring it up: "
            f"ip link set lo up (a namespace made by unshare -rn has it "
            f"down)")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Namespaces an earlier run left when it was killed are deleted
    before any test makes its own (:mod:`tests.fixtures.netns`). Only the
    functional tier makes namespaces: the others touch none (the unit tier
    may run as root of a user namespace, which cannot read the ledger)."""
    from tests.fixtures.netns import sweep_leftovers  # a plugin: loaded late
    if os.geteuid() == 0 and \
            session.config.getoption("--tier") in (None, "functional"):
        swept = sweep_leftovers()
        if swept:
            print(f"deleted {len(swept)} network namespaces left by "
                  f"killed test runs", file=sys.stderr)


def pytest_collection_modifyitems(config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    wanted = config.getoption("--tier")
    if wanted is not None:
        others = [item for item in items if tier(item) != wanted]
        if others:
            config.hook.pytest_deselected(items=others)
            items[:] = [item for item in items if tier(item) == wanted]
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


def _exit_watchdog(grace: float) -> None:
    time.sleep(grace)
    print(f"\ntest run still exiting {grace:.0f} s after its end: a thread "
          "a test left running holds the interpreter's exit (its stack "
          "below); exiting with status 3", file=sys.stderr, flush=True)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(3)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The exit's watchdog (module docstring): a daemon thread, gone with
    the interpreter when the exit takes less than the grace."""
    if hasattr(config, "workerinput"):
        return
    threading.Thread(target=_exit_watchdog, args=(EXIT_GRACE,),
                     name="exit-watchdog", daemon=True).start()
