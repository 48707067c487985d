"""When the controller may log in to Keystone: the renewal margin and the
backoff after a refused login.

Margin: keystoneauth renews a cached token once it expires within a margin
(``[controller] token_renew_margin``, 120 s by default). The token's
lifetime is the cloud operator's choice; with one shorter than the margin
every token is "about to expire" the moment it arrives and the controller
would log in on every call. So the margin used is never more than
:data:`MAX_MARGIN_FRACTION` of the token's real lifetime (``expires_at``
minus ``issued_at``, both Keystone's clock, so clock skew does not matter);
a configured margin above it is warned about once.

Backoff: a refused login (a wrong or expired password, a disabled user) is
not retried at the rate of the calls that need a token: an account lockout
policy counts every failed attempt. After the n-th refusal in a row no login
is tried for ``min(cap, base * 2**(n-1))`` seconds, times a random factor in
[0.5, 1) so replicas do not try in step; meanwhile every call needing a new
token fails at once as :class:`KeystoneUnavailable` (readiness names
Keystone and says when the next try is). Unreachable or hung Keystones are
not backed off here: they cost no lockout, and the next call should find a
Keystone that came back at once.

This module holds no keystoneauth1 (:mod:`.adapter` wires it in).
"""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

from kuryr_supervisor.controller.openstack.wire import OpenStackUnavailable

LOG = logging.getLogger(__name__)

#: The renewal margin is at most this fraction of a token's lifetime.
MAX_MARGIN_FRACTION = 0.5
#: First and longest wait after a refused login (seconds).
BACKOFF_BASE = 1.0
BACKOFF_CAP = 60.0


class KeystoneUnavailable(OpenStackUnavailable):
    """No token: Keystone refused, hung, failed or is backed off from.
    Raised whichever call needed the token, so a Neutron call that could
    not authenticate names Keystone, not Neutron."""


class LoginPolicy:
    """The margin in force and the refused-login backoff (see module)."""

    def __init__(self, margin: float, *, base: float = BACKOFF_BASE,
                 cap: float = BACKOFF_CAP,
                 clock: Callable[[], float] = time.monotonic,
                 jitter: Callable[[], float] = random.random) -> None:
        self.configured = margin
        self.margin = margin
        self.base, self.cap = base, cap
        self._clock, self._jitter = clock, jitter
        self.refusals = 0
        self.retry_at = 0.0
        self._reason = ""
        self._warned = False
        #: Logins that failed in this process, refused or not answered:
        #: whoever watches Keystone looks again when it moves.
        self.failures = 0

    # -- margin ------------------------------------------------------------------
    def token_issued(self, issued: float | None, expires: float | None,
                     now: float | None = None) -> float:
        """The margin to use for a token issued at ``issued`` and expiring
        at ``expires`` (epoch seconds; ``issued`` unknown: ``now``)."""
        if expires is None:
            return self.margin
        start = issued if issued is not None else (now or time.time())
        lifetime = max(0.0, expires - start)
        cap = lifetime * MAX_MARGIN_FRACTION
        if self.configured > cap:
            if not self._warned:
                LOG.warning("[controller] token_renew_margin = %gs is more than "
                            "%d%% of the token's lifetime (%gs): renewing %gs "
                            "before expiry instead", self.configured,
                            int(MAX_MARGIN_FRACTION * 100), lifetime, cap)
                self._warned = True
            self.margin = cap
        else:
            self.margin = self.configured
        return self.margin

    # -- backoff -----------------------------------------------------------------
    def may_log_in(self) -> None:
        """Raise :class:`KeystoneUnavailable` while backing off."""
        left = self.retry_at - self._clock()
        if self.refusals and left > 0:
            raise KeystoneUnavailable(
                f"Keystone refused the login {self.refusals} time(s) in a row "
                f"({self._reason}); next try in {left:.0f}s")

    def failed(self) -> None:
        """A login failed (refused, unreachable, hung or garbled)."""
        self.failures += 1

    def refused(self, reason: str) -> None:
        self.refusals += 1
        self._reason = reason
        wait = min(self.cap, self.base * 2 ** (self.refusals - 1))
        wait *= 0.5 + 0.5 * self._jitter()
        self.retry_at = self._clock() + wait
        if self.refusals == 1:
            LOG.error("Keystone refused the controller's login (%s); trying "
                      "again with backoff, at most every %gs", reason, self.cap)

    def succeeded(self) -> None:
        if self.refusals:
            LOG.info("Keystone accepts the controller's login again")
        self.refusals = 0
        self.retry_at = 0.0
