"""HTTP/1.1 request framing and the WSGI call, for :mod:`.httpserver`.

Kept apart from the server so the parsing (hostile bytes in, a WSGI environ
out) is tested without sockets. Only what probe clients send is supported:
requests with a ``Content-Length`` body or none; ``Transfer-Encoding``,
a malformed request or one over the header or body limits closes the
connection unanswered.

Invariants: :func:`complete` decides from the bytes alone whether a whole
request has arrived and raises :class:`BadRequest` as soon as the bytes can
never become one; :func:`respond` never raises for anything the app does
(an app failure is a 500 and the connection closes).
"""
from __future__ import annotations

import dataclasses
import io
import logging
import sys
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

LOG = logging.getLogger(__name__)

_END = b"\r\n\r\n"
_VERSIONS = ("HTTP/1.0", "HTTP/1.1")
_MAX_HEADERS = 100


class BadRequest(Exception):
    """The bytes received can never be a request we serve."""


@dataclasses.dataclass
class Parsed:
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None


def _head(buf: bytes, max_header_bytes: int) -> int:
    """Index of the end of the headers, -1 while incomplete."""
    end = buf.find(_END, 0, max_header_bytes + len(_END))
    if end < 0 and len(buf) > max_header_bytes:
        raise BadRequest("headers too large")
    return end


def _parse_head(raw: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes all
        raise BadRequest("undecodable") from exc
    line, _, rest = text.partition("\r\n")
    parts = line.split(" ")
    if len(parts) != 3 or parts[2] not in _VERSIONS or not parts[0].isalpha():
        raise BadRequest(f"bad request line {line[:80]!r}")
    headers: list[tuple[str, str]] = []
    for field in rest.split("\r\n") if rest else []:
        name, sep, value = field.partition(":")
        if not sep or not name or name != name.strip() or " " in name:
            raise BadRequest("bad header line")
        headers.append((name, value.strip()))
    if len(headers) > _MAX_HEADERS:
        raise BadRequest("too many headers")
    return parts[0], parts[1], parts[2], headers


def _length(headers: list[tuple[str, str]], max_body_bytes: int) -> int:
    lengths = {v for k, v in headers if k.lower() == "content-length"}
    if any(k.lower() == "transfer-encoding" for k, _ in headers):
        raise BadRequest("Transfer-Encoding is not supported")
    if not lengths:
        return 0
    if len(lengths) != 1:
        raise BadRequest("conflicting Content-Length")
    value = lengths.pop()
    if not value.isdigit() or int(value) > max_body_bytes:
        raise BadRequest("bad or too large Content-Length")
    return int(value)


def complete(buf: bytes, max_header_bytes: int, max_body_bytes: int) -> bool:
    """True once ``buf`` holds a whole request (headers and body)."""
    end = _head(buf, max_header_bytes)
    if end < 0:
        return False
    *_, headers = _parse_head(buf[:end])
    return len(buf) >= end + len(_END) + _length(headers, max_body_bytes)


def split(buf: bytes) -> tuple[Parsed, bytes]:
    """The first request in ``buf`` (known :func:`complete`) and the rest."""
    end = buf.index(_END)
    method, target, version, headers = _parse_head(buf[:end])
    start = end + len(_END)
    length = _length(headers, sys.maxsize)
    return (Parsed(method, target, version, headers, buf[start:start + length]),
            buf[start + length:])


def keep_alive(req: Parsed) -> bool:
    connection = (req.header("connection") or "").lower()
    if req.version == "HTTP/1.1":
        return "close" not in connection
    return "keep-alive" in connection


def environ(req: Parsed, server: tuple[str, int], peer: Any) -> dict[str, Any]:
    """The PEP 3333 environ of one request."""
    path, _, query = req.target.partition("?")
    env: dict[str, Any] = {
        "REQUEST_METHOD": req.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": urllib.parse.unquote_to_bytes(path).decode("latin-1"),
        "QUERY_STRING": query,
        "SERVER_NAME": server[0], "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": req.version,
        "REMOTE_ADDR": peer[0] if isinstance(peer, tuple) else "",
        "REMOTE_PORT": str(peer[1]) if isinstance(peer, tuple) else "",
        "CONTENT_LENGTH": str(len(req.body)) if req.body else "",
        "CONTENT_TYPE": req.header("content-type") or "",
        "wsgi.version": (1, 0), "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(req.body), "wsgi.errors": sys.stderr,
        "wsgi.multithread": True, "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    for name, value in req.headers:
        key = "HTTP_" + name.upper().replace("-", "_")
        if key in ("HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH"):
            continue
        env[key] = f"{env[key]},{value}" if key in env else value
    return env


def _status_line(version: str, status: str) -> bytes:
    return f"{version} {status}\r\n".encode("latin-1")


def respond(app: Callable[..., Iterable[bytes]], req: Parsed, *,
            server: tuple[str, int], peer: Any) -> tuple[bytes, bool]:
    """Run ``app`` for ``req``: the whole response and whether to keep the
    connection open afterwards."""
    keep = keep_alive(req)
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]],
                       exc_info: Any = None) -> Callable[[bytes], None]:
        started[:] = [status, headers]
        return chunks.append

    chunks: list[bytes] = []
    try:
        result = app(environ(req, server, peer), start_response)
        try:
            chunks.extend(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        status, headers = started
    except Exception:  # noqa: BLE001 - a 500, never a dropped probe thread
        LOG.exception("%s %s failed", req.method, req.target[:80])
        status, headers, chunks, keep = "500 Internal Server Error", [], [], False
    body = b"" if req.method == "HEAD" else b"".join(chunks)
    out = [_status_line(req.version, status)]
    for name, value in headers:
        if name.lower() not in ("content-length", "connection"):
            out.append(f"{name}: {value}\r\n".encode("latin-1"))
    out.append(f"Content-Length: {len(b''.join(chunks))}\r\n".encode())
    out.append(b"Connection: keep-alive\r\n\r\n" if keep
               else b"Connection: close\r\n\r\n")
    return b"".join(out) + body, keep
