"""Keystone logins as a real cloud makes them matter: a token lifetime
shorter than the renewal margin, a wrong password, and the Keystone and
Neutron checks kept apart, against the Keystone and Neutron fakes over
real HTTP."""
from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack.login import LoginPolicy
from kuryr_supervisor.master.roles.dependencies import openstack_checks
from tests.fixtures.openstack import FakeKeystone, FakeNeutron
from tests.unit.test_openstack import neutron_conf


@pytest.fixture
def cloud() -> Iterator[tuple[FakeKeystone, FakeNeutron]]:
    keystone = FakeKeystone().start()
    neutron = FakeNeutron(keystone).start()
    yield keystone, neutron
    neutron.hang = 0.0
    keystone.hang = 0.0
    neutron.stop()
    keystone.stop()


def login_times(keystone: FakeKeystone) -> list[float]:
    return [at for at, m, p in list(keystone.requests)
            if (m, p) == ("POST", "/v3/auth/tokens")]


def call_for(api: osa.OpenStack, seconds: float) -> list[str]:
    """Neutron calls every 20 ms for ``seconds``; the errors seen."""
    errors = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            api.ports_of("x")
        except osa.OpenStackUnavailable as exc:
            errors.append(str(exc))
        time.sleep(0.02)
    return errors


def test_short_token_lifetime_bounds_logins(
        tmp_path: Path, cloud: tuple[FakeKeystone, FakeNeutron],
        caplog: pytest.LogCaptureFixture) -> None:
    """A 10 s token and the default 120 s margin: one login for seconds of
    calls (not one per call), the margin cut to half the lifetime, warned
    about once."""
    keystone, neutron = cloud
    keystone.token_lifetime = 10.0
    api = osa.OpenStack.from_conf(neutron_conf(tmp_path, keystone))
    assert api.login.configured == 120.0
    with caplog.at_level(logging.WARNING):
        assert call_for(api, 3.0) == []
    assert keystone.issued() == 1, keystone.issued()
    assert api.login.margin == pytest.approx(5.0, abs=0.1)
    warned = [r for r in caplog.records if "token_renew_margin" in r.message]
    assert len(warned) == 1, warned


def test_short_token_still_renewed_before_expiry(
        tmp_path: Path, cloud: tuple[FakeKeystone, FakeNeutron]) -> None:
    """A 2 s token: renewed about every second (half its life), never sent
    expired, never a login per call."""
    keystone, neutron = cloud
    keystone.token_lifetime = 2.0
    api = osa.OpenStack.from_conf(neutron_conf(tmp_path, keystone))
    assert call_for(api, 3.5) == []
    assert 3 <= keystone.issued() <= 5, keystone.issued()
    assert neutron.rejected_tokens == 0


def test_wrong_password_backs_off(
        tmp_path: Path, cloud: tuple[FakeKeystone, FakeNeutron]) -> None:
    """Calls every 20 ms with a wrong password: a handful of logins in
    4 s, further and further apart; every failure names Keystone and, while
    backing off, when the next try is. The right password is taken at the
    next try."""
    keystone, _ = cloud
    api = osa.OpenStack.from_conf(neutron_conf(tmp_path, keystone))
    keystone.password = "changed"             # the controller's is wrong
    errors = call_for(api, 4.0)
    tries = login_times(keystone)
    assert 2 <= len(tries) <= 4, tries      # 1 s, 2 s, 4 s waits (jittered)
    gaps = [b - a for a, b in zip(tries, tries[1:], strict=False)]
    assert all(g >= 0.45 for g in gaps), gaps
    assert gaps == sorted(gaps) or len(gaps) < 2, gaps
    assert len(errors) > 50 and all("Keystone" in e for e in errors), errors[:3]
    assert any("next try in" in e for e in errors)
    with pytest.raises(osa.KeystoneUnavailable, match="next try in"):
        api.token()
    keystone.password = "secret"
    deadline = time.monotonic() + 10.0
    while True:
        try:
            api.token()
            break
        except osa.KeystoneUnavailable:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert api.login.refusals == 0


def test_backoff_is_exponential_capped_and_jittered() -> None:
    now = [0.0]
    policy = LoginPolicy(120.0, base=1.0, cap=60.0, clock=lambda: now[0],
                         jitter=lambda: 0.999)
    waits = []
    for _ in range(9):
        policy.refused("HTTP 401")
        waits.append(round(policy.retry_at - now[0], 1))
        with pytest.raises(osa.KeystoneUnavailable):
            policy.may_log_in()
        now[0] = policy.retry_at
        policy.may_log_in()                   # due: allowed
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    low = LoginPolicy(120.0, clock=lambda: 0.0, jitter=lambda: 0.0)
    low.refused("HTTP 401")
    assert low.retry_at == 0.5                # jitter: half to all of it
    low.succeeded()
    low.may_log_in()
    assert low.token_issued(100.0, 190.0) == 45.0     # 90 s token
    assert LoginPolicy(30.0).token_issued(100.0, 3700.0) == 30.0


def test_hung_neutron_fails_only_the_neutron_check(
        tmp_path: Path, cloud: tuple[FakeKeystone, FakeNeutron]) -> None:
    """Neutron hangs: the neutron check fails naming Neutron, and the
    keystone check stays green, even when it must log in again meanwhile
    (its calls do not queue behind the hung Neutron call)."""
    keystone, neutron = cloud
    conf = neutron_conf(tmp_path, keystone, openstack_timeout=0.5,
                        openstack_check_interval=0.1)
    checks = {c.name: c for c in openstack_checks(conf)}
    now = time.monotonic()
    assert checks["keystone"].run(now).ok
    assert checks["neutron"].run(now).ok
    neutron.hang = 30.0
    for i in range(1, 4):
        result = checks["neutron"].run(now + i)
        assert not result.ok and "Neutron" in result.message or \
            "neutron" in result.message, result.message
        assert "Keystone" not in result.message, result.message
        checks["keystone"].cloud._auth.invalidate()        # a new login
        result = checks["keystone"].run(now + i)
        assert result.ok, result.message


def test_hung_keystone_fails_the_keystone_check_by_name(
        tmp_path: Path, cloud: tuple[FakeKeystone, FakeNeutron]) -> None:
    keystone, _ = cloud
    conf = neutron_conf(tmp_path, keystone, openstack_timeout=0.5,
                        openstack_check_interval=0.1)
    checks = {c.name: c for c in openstack_checks(conf)}
    keystone.hang = 30.0
    now = time.monotonic()
    result = checks["keystone"].run(now)
    assert not result.ok and "keystone" in result.message.lower(), \
        result.message
    for i in range(3):                # the token request still hangs
        result = checks["neutron"].run(now + i)
        assert not result.ok and "no token" in result.message, result.message
        result = checks["keystone"].run(now + i)
        assert not result.ok and "keystone" in result.message.lower(), \
            result.message
