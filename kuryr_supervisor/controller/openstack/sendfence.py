"""The write fence where a request leaves the process: checked before each
socket write of a Keystone or Neutron connection, not only before a call.

:meth:`~kuryr_supervisor.kubernetes.fence.WriteFence.check` before a call
leaves a window: keystoneauth may fetch a token, urllib3 may open a
connection. A leader paused there (SIGSTOP, a frozen VM) past its lease
resumes and sends the create it was about to send, after the new leader
has made those pods' ports (seen against a real Neutron: 7 ports made
twice, a minute after the pause, then swept). Checked before each write to
the socket, the window is one system call; a request whose headers left
before a pause and whose body would leave after it is cut off there (the
process exits; Neutron never gets a whole request and commits nothing).

:class:`FencedAdapter` is the transport of the adapter's *write* session
(:mod:`.adapter`): the calls that write go through it, and so does a
Keystone login or a version discovery one of them needs (keystoneauth
sends those through the session of the request that needs them); reads
go through a session of their own, unfenced, as a call's check leaves
them. Requests through an HTTP proxy are not fenced here (the call's own
check still is). The pools themselves are
:mod:`kuryr_supervisor.kubernetes.fencedpool`'s, shared with the
Kubernetes transport.
"""
from __future__ import annotations

import functools
from typing import Any

from keystoneauth1 import session as ks_session

from kuryr_supervisor.kubernetes.fence import WriteFence
from kuryr_supervisor.kubernetes.fencedpool import (
    FencedHTTPConnectionPool,
    FencedHTTPSConnectionPool,
)

#: What the fence's line names when it refuses.
WHAT = "a write to Neutron"


class FencedAdapter(ks_session.TCPKeepAliveAdapter):  # type: ignore[misc]
    """keystoneauth's keep-alive transport adapter whose connections check
    ``fence`` before each write (see the module)."""

    def __init__(self, fence: WriteFence, **kwargs: Any) -> None:
        self.fence = fence          # init_poolmanager runs in __init__
        super().__init__(**kwargs)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": functools.partial(FencedHTTPConnectionPool,
                                      fence=self.fence, what=WHAT),
            "https": functools.partial(FencedHTTPSConnectionPool,
                                       fence=self.fence, what=WHAT)}
