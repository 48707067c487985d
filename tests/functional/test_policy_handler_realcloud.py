"""The network_policy handler's tests (tests/unit/test_policy_handler.py)
against the real Keystone and Neutron (address groups enabled) instead of
the fakes: what the handler makes there must be what the model asks, a
restart must write nothing, the sweep and the races must leave nothing.
The fault tests (a quota met, Neutron stopped) use the fake's knobs and
stay there; the daemon's own refusal test runs on both clouds
(tests/functional/test_controller_policy.py)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures import policyhandler
from tests.fixtures.fakeapi import FakeAPI
from tests.fixtures.policyhandler import World
from tests.fixtures.realcloud import RealCloud
from tests.unit.test_policy_handler import (  # noqa: F401 - collected here
    test_a_namespace_deleted_with_its_policies,
    test_a_pod_whose_port_comes_later,
    test_a_policy_deleted_while_its_pods_are_relabelled,
    test_a_restart_writes_nothing,
    test_changes_converge_and_a_pod_joining_costs_one_call,
    test_policies_converge_from_scratch,
    test_two_policies_deleted_at_once,
    test_what_was_deleted_while_down_is_swept,
)

pytestmark = pytest.mark.realcloud


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI().start()
    yield fake
    fake.stop()


@pytest.fixture
def world(api: FakeAPI, real_cloud: RealCloud,
          tmp_path: Path) -> Iterator[World]:
    yield from policyhandler.world(api, real_cloud, tmp_path)
