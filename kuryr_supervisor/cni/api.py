"""The daemon's CNI HTTP API: one small WSGI app.

Routes:
- ``POST /cni`` with ``{"env": {"CNI_COMMAND": ..., ...}, "config": {...}}``:
  200 and the CNI result, 204 when the command prints nothing (DEL, CHECK,
  STATUS, GC), or the spec's error object with the HTTP status of its
  ``errors.WIRE`` row;
- ``GET /version``: the supported spec versions.

An ADD whose client left before it finished (the shim's timeout) is rolled
back (:func:`client_gone`, asked by the service under the container's lock,
so a retry cannot be replayed an attachment that is then undone).

Invariants: every answer, including routing errors, oversized bodies and
unexpected exceptions, is a JSON CNI object (never werkzeug's HTML pages,
never a traceback); the body is read only up to ``max_request_bytes``.
With a shared state, every ``/cni`` answer is counted by command and result
code, and ADD/DEL durations go to the latency histogram (``/metrics``).
"""
from __future__ import annotations

import json
import logging
import select
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from kuryr_supervisor import errors
from kuryr_supervisor.cni import protocol
from kuryr_supervisor.cni.service import CNIService
from kuryr_supervisor.state import SharedState

LOG = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 1 << 20
#: Tracing headers the shim forwards; logged so a CNI call can be followed.
TRACE_HEADERS = ("traceparent", "tracestate")

_URLS = Map([Rule("/cni", endpoint="cni", methods=["POST"]),
             Rule("/version", endpoint="version", methods=["GET"])])


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A key given twice is refused: two readers of the same netconf (the
    runtime and the daemon) could otherwise each take a different value."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"duplicate key {key!r}")
        obj[key] = value
    return obj


def _no_constant(name: str) -> Any:
    """NaN, Infinity and -Infinity are not JSON (RFC 8259)."""
    raise ValueError(f"{name} is not valid JSON")


def _json(obj: Any, status: int) -> Response:
    return Response(json.dumps(obj) + "\n", status=status,
                    mimetype="application/json")


def error_response(exc: errors.CNIError, cni_version: str) -> Response:
    return _json(exc.to_cni(cni_version), exc.wire.http_status)


def client_gone(environ: dict[str, Any]) -> bool:
    """True when the client closed its end of a Unix socket entirely.

    The shim shuts down its writing side after sending (POLLRDHUP alone, it
    still waits for the answer); only a client that closed or died makes
    the kernel report POLLHUP on a Unix stream socket. A TCP peer's close
    cannot be told from a half-close, so over TCP this is always False.
    """
    sock = environ.get("werkzeug.socket")
    if sock is None or getattr(sock, "family", None) != socket.AF_UNIX:
        return False
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLHUP | select.POLLERR)
    return any(ev & (select.POLLHUP | select.POLLERR)
               for _, ev in poller.poll(0))


class CNIApp:
    """WSGI callable dispatching CNI requests to a :class:`CNIService`."""

    def __init__(self, service: CNIService, *,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 state: SharedState | None = None) -> None:
        self._service = service
        self.max_request_bytes = max_request_bytes
        self._state = state

    def close(self) -> None:
        """Graceful stop, once drained: close the service's store."""
        self._service.close()

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        request = Request(environ)
        request.max_content_length = self.max_request_bytes
        response = self._dispatch(request)
        return response(environ, start_response)

    def _dispatch(self, http: Request) -> Response:
        try:
            endpoint, _ = _URLS.bind_to_environ(http.environ).match()
        except HTTPException as exc:
            return error_response(errors.UnknownEndpoint(
                f"{http.method} {http.path}: {exc.name}"), protocol.LATEST)
        if endpoint == "version":
            return _json(protocol.version_answer(None), 200)
        return self._cni(http)

    def _cni(self, http: Request) -> Response:
        started = time.monotonic()
        command, code, response = self._answer(http)
        if self._state is not None:
            self._state.record_cni_request(command, code,
                                           time.monotonic() - started)
        return response

    def _answer(self, http: Request) -> tuple[str, int, Response]:
        """(command, result code, response) for one ``/cni`` request."""
        config: Any = None
        command = "unknown"
        try:
            body = self._decode(http)
            config = body.get("config") if isinstance(body, dict) else None
            request = protocol.parse(body)
            command = request.command
            trace = {h: http.headers[h] for h in TRACE_HEADERS
                     if h in http.headers}
            LOG.debug("CNI %s %s/%s %s", command, request.container_id,
                      request.ifname, trace or "")
            result = self._service.handle(
                request, abandoned=lambda: client_gone(http.environ))
        except errors.CNIError as exc:
            level = logging.WARNING if exc.wire.counts_as_failure else logging.INFO
            LOG.log(level, "CNI %s refused: code %d: %s %s", command,
                    exc.wire.code, exc.msg, exc.details)
            return command, exc.wire.code, error_response(
                exc, protocol.version_of(config))
        except Exception as exc:  # noqa: BLE001 - a JSON error, never a traceback
            LOG.exception("CNI %s: unexpected failure", command)
            internal = errors.InternalError(f"unexpected failure: {exc}")
            return command, internal.wire.code, error_response(
                internal, protocol.version_of(config))
        if result is None:
            return command, 0, Response(status=204)
        return command, 0, _json(result, 200)

    @staticmethod
    def _decode(http: Request) -> Any:
        try:
            raw = http.get_data(cache=False)
        except RequestEntityTooLarge as exc:
            raise errors.RequestTooLarge(
                f"request body over {http.max_content_length} bytes") from exc
        if not raw:
            raise errors.DecodeError("empty request body")
        try:
            return json.loads(raw, object_pairs_hook=_no_duplicates,
                              parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:
            raise errors.DecodeError("request body is not JSON",
                                     str(exc)[:200]) from exc
