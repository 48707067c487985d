"""The write fence where a request leaves the process: checked before each
socket write of a Keystone or Neutron connection, not only before a call.

:func:`kuryr_supervisor.kubernetes.fence.check` before a call leaves a
window: keystoneauth may fetch a token, urllib3 may open a connection. A
leader paused there (SIGSTOP, a frozen VM) past its lease resumes and sends
the create it was about to send, after the new leader has made those pods'
ports (seen against a real Neutron: 7 ports made twice, a minute after the
pause, then swept). Checked before each write to the socket, the window is
one system call; a request whose headers left before a pause and whose body
would leave after it is cut off there (the process exits; Neutron never
gets a whole request and commits nothing).

Only the requests of a call that writes (:func:`write`, around a Neutron
write whose own check passed) are checked, a Keystone login it needs
included; reads are not, as a call's are not. Unarmed (any process but a
handler process of the leading replica), a check costs one test. Requests
through an HTTP proxy are not fenced here (the call's own check still
is).
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from keystoneauth1 import session as ks_session
from urllib3 import connection, connectionpool

from kuryr_supervisor.kubernetes import fence

_call = threading.local()


@contextlib.contextmanager
def write() -> Iterator[None]:
    """Around a call that writes (its own check passed): each socket write
    of it, a Keystone login it needs included, checks the fence again."""
    _call.writing = True
    try:
        yield
    finally:
        _call.writing = False


class _Fenced:
    """Mixed into urllib3's connections: ``send`` carries a request's
    headers and each chunk of its body (http.client's ``send``)."""

    def send(self, data: Any) -> None:
        if getattr(_call, "writing", False):
            fence.check("a write to Neutron")
        super().send(data)  # type: ignore[misc]


class _HTTPConnection(_Fenced, connection.HTTPConnection):
    pass


class _HTTPSConnection(_Fenced, connection.HTTPSConnection):
    pass


class _HTTPPool(connectionpool.HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(connectionpool.HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


class FencedAdapter(ks_session.TCPKeepAliveAdapter):  # type: ignore[misc]
    """keystoneauth's keep-alive transport adapter whose connections check
    the fence before each write (see the module)."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": _HTTPPool, "https": _HTTPSPool}
