"""urllib3 connection pools whose connections ask a :class:`~.fence.WriteFence`
before each socket write: the fence where a request leaves the process.

A check before a call leaves a window: urllib3 may open a connection, a
token may be read. A leader paused there (SIGSTOP, a frozen VM) past its
lease resumes and sends the write it was about to send, beside the new
leader: seen against the Kubernetes API (a PodPort's status written on
resume, one run in three) and against a real Neutron (ports made twice).
Checked before each write to the socket, the window is one system call; a
request whose headers left before a pause and whose body would leave after
it is cut off there (the process exits; the server never gets a whole
request and commits nothing).

Used by the Kubernetes transport for the writes that steer pods
(:func:`~.transport.fenced`) and by the OpenStack adapter's write session
(:mod:`kuryr_supervisor.controller.openstack.sendfence`). ``what`` names
the write in the line the fence logs.
"""
from __future__ import annotations

from typing import Any

from urllib3 import connection, connectionpool

from kuryr_supervisor.kubernetes.fence import WriteFence


class _Fenced:
    """Mixed into urllib3's connections: ``send`` carries a request's
    headers and each chunk of its body (http.client's ``send``)."""

    def __init__(self, *args: Any, fence: WriteFence, what: str,
                 **kwargs: Any) -> None:
        self.fence = fence
        self.what = what
        super().__init__(*args, **kwargs)

    def send(self, data: Any) -> None:
        self.fence.check(self.what)
        super().send(data)  # type: ignore[misc]


class _HTTPConnection(_Fenced, connection.HTTPConnection):
    pass


class _HTTPSConnection(_Fenced, connection.HTTPSConnection):
    pass


class _FencedPool:
    """Mixed into urllib3's pools: their connections get the fence
    through the keyword arguments a pool passes each new connection."""

    conn_kw: dict[str, Any]

    def __init__(self, *args: Any, fence: WriteFence, what: str,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn_kw.update(fence=fence, what=what)


class FencedHTTPConnectionPool(_FencedPool, connectionpool.HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class FencedHTTPSConnectionPool(_FencedPool, connectionpool.HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


def fenced_pool(url: str, fence: WriteFence, what: str, **kwargs: Any
                ) -> connectionpool.HTTPConnectionPool:
    """A pool to ``url`` (``scheme://host:port``) whose every socket write
    asks ``fence`` first; ``kwargs`` as urllib3's pools take them."""
    from urllib3.util import parse_url
    parsed = parse_url(url)
    cls = FencedHTTPSConnectionPool if parsed.scheme == "https" else \
        FencedHTTPConnectionPool
    return cls(parsed.host or "", parsed.port, fence=fence, what=what, **kwargs)
