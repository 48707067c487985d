"""Keystone logins under the login policy, through keystoneauth's own
extension point: an identity plugin.

keystoneauth asks an identity plugin
(:class:`keystoneauth1.identity.base.BaseIdentityPlugin`) for the current
token with ``get_access`` (the cached one, or a new one when it expires
within ``MIN_TOKEN_LIFE_SECONDS``), and the plugin makes a new one with
``get_auth_ref``: the documented methods a plugin overrides.
:class:`PolicedAuth` is such a plugin: it holds the token cache and
decides on its own clock when the cached token is due
(:meth:`~PolicedAuth.get_access`), its ``get_auth_ref`` asks the
:class:`~.login.LoginPolicy` whether a login may happen now and then lets
the plugin ``[neutron]`` configures (password, application credential...)
do the login, and its ``MIN_TOKEN_LIFE_SECONDS`` is the policy's margin,
set from each new token's lifetime. So a reader sees when a login happens
here, without keystoneauth's internals: on the first call, once the token
expires within the margin (or was invalidated), never while backed off.

Every failure of a login leaves as :class:`~.login.KeystoneUnavailable`.
Imported only by :mod:`.adapter`, when an adapter is built (keystoneauth1
is heavy, and the CNI role mostly does without it).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from keystoneauth1 import exceptions as ks_exc
from keystoneauth1.identity import base as identity

from kuryr_supervisor.controller.openstack.login import (
    KeystoneUnavailable,
    LoginPolicy,
)


def failure(what: str, exc: Exception, timeout: float) -> str:
    """One phrase for a hung dependency, whichever bound saw it first:
    the session's per-request timeout or the whole-call deadline."""
    if isinstance(exc, ks_exc.ConnectTimeout):
        return f"{what}: no answer within {timeout:g}s"
    return f"{what}: {exc}"


class PolicedAuth(identity.BaseIdentityPlugin):
    """keystoneauth's token cache whose logins pass ``policy`` and are
    made by ``plugin`` (see the module); ``timeout`` names a hung login's
    bound; ``clock`` is the wall clock a token's lifetime is read on."""

    #: The cached token (keystoneauth's ``AccessInfo``; None: none yet).
    auth_ref: Any

    def __init__(self, plugin: Any, policy: LoginPolicy, *, timeout: float,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(auth_url=getattr(plugin, "auth_url", None))
        self.plugin = plugin
        self.policy = policy
        self.timeout = timeout
        self._clock = clock
        self._cache = threading.Lock()
        self.MIN_TOKEN_LIFE_SECONDS = policy.margin  # type: ignore[assignment]

    def get_access(self, session: Any, **kwargs: Any) -> Any:
        """The cached token, or a new one (:meth:`get_auth_ref`) when
        there is none or it expires within the margin on ``clock``; one
        thread logs in while the others wait for its token."""
        with self._cache:
            if self.auth_ref is None or self._due(self.auth_ref):
                self.auth_ref = self.get_auth_ref(session)
            return self.auth_ref

    def _due(self, access: Any) -> bool:
        expires = access.expires
        return expires is not None and \
            expires.timestamp() - self._clock() < self.MIN_TOKEN_LIFE_SECONDS

    def get_auth_ref(self, session: Any, **kwargs: Any) -> Any:
        """A new token from ``plugin``, if the policy allows a login now;
        the renewal margin then follows the new token's lifetime."""
        self.policy.may_log_in()
        try:
            return self._log_in(session, **kwargs)
        except KeystoneUnavailable:
            self.policy.failed()
            raise

    def _log_in(self, session: Any, **kwargs: Any) -> Any:
        """One login by ``plugin``; every failure as
        :class:`KeystoneUnavailable`."""
        try:
            access = self.plugin.get_auth_ref(session, **kwargs)
            issued, expires = access.issued, access.expires
        except ks_exc.HttpError as exc:
            if 400 <= (exc.http_status or 0) < 500:
                self.policy.refused(f"HTTP {exc.http_status}")
                raise KeystoneUnavailable(f"Keystone refused the login: {exc}",
                                          exc.http_status) from exc
            raise KeystoneUnavailable(
                failure("Keystone", exc, self.timeout)) from exc
        except ks_exc.ClientException as exc:
            raise KeystoneUnavailable(
                failure("Keystone", exc, self.timeout)) from exc
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise KeystoneUnavailable(f"Keystone answered garbage: "
                                      f"{exc!r}") from exc
        self.policy.succeeded()
        self.MIN_TOKEN_LIFE_SECONDS = self.policy.token_issued(  # type: ignore[assignment]
            issued.timestamp() if issued else None,
            expires.timestamp() if expires else None, self._clock())
        return access
