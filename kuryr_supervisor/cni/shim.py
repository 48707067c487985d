#!/usr/bin/env -S python3 -I -S
"""kuryr-cni: the CNI plugin executable, a thin client of kuryr-supervisor.

The container runtime runs this once per CNI call with ``CNI_*`` variables
and the network configuration on stdin. It forwards both to the daemon's
CNI API (``POST /cni``) and prints the daemon's answer: the result and exit
0, or the spec's error object and exit 1.

Invariants:
- standard library only, and only the modules it needs: it is copied alone
  to ``/opt/cni/bin/kuryr-cni`` and run by the host's ``python3``, and Python
  start-up is the floor of every pod's CNI latency. Hence ``-I -S`` in the
  shebang (no ``site``, no user or environment paths: about 2 ms), and the C
  halves of ``json`` and ``socket`` (``_json``, ``_socket``) instead of the
  modules, whose imports of ``re``, ``enum`` and ``selectors`` would cost
  about 8 ms, more than the rest of the shim's start-up;
- VERSION is answered locally (the runtime asks before the daemon is up);
- the request goes only to a Unix socket served by root (``SO_PEERCRED``):
  otherwise error code 11 naming the peer, and nothing is sent;
- a daemon that cannot be reached or does not answer in time is error code
  11 (try again later), never a hang past ``timeout`` and never a traceback.

Netconf keys read here: ``daemon_socket`` (``unix:///path``, default
``unix:///run/kuryr-supervisor/cni.sock``, or ``host:port`` /
``http://host:port``) and ``timeout`` (seconds; default 120 for ADD, 60
otherwise).
"""
from __future__ import annotations

import _socket
import os
import sys
import time

try:
    from _json import encode_basestring_ascii as _quote
    from _json import make_scanner as _make_scanner
except ImportError:     # an interpreter without json's C accelerator
    from json.encoder import (  # type: ignore[assignment]
        py_encode_basestring_ascii as _quote,
    )
    from json.scanner import (  # type: ignore[attr-defined,no-redef]
        py_make_scanner as _make_scanner,
    )


class _Context:
    """What the scanner reads: ``json.loads``' defaults."""

    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int = float, int
    parse_constant = {"NaN": float("nan"), "Infinity": float("inf"),
                      "-Infinity": float("-inf")}.__getitem__
    memo: dict[str, str] = {}


_scan = _make_scanner(_Context())  # type: ignore[arg-type]


def _loads(text: str) -> Any:
    """``json.loads`` of a str: the same scanner, ValueError on bad input."""
    text = text.strip(" \t\n\r")
    try:
        value, end = _scan(text, 0)
    except StopIteration as exc:
        raise ValueError(f"invalid JSON at char {exc.value}") from None
    except SystemError:
        # The C scanner builds its error from json.decoder, but only if that
        # module is already imported; alone, it fails with SystemError. On
        # this error path only, the full decoder says what is wrong.
        import json
        json.loads(text)
        raise ValueError("invalid JSON") from None
    if end != len(text):
        raise ValueError(f"extra data at char {end}")
    return value


def _dumps(obj: Any) -> str:
    """``json.dumps`` of what the shim writes: str, int, lists, dicts."""
    if isinstance(obj, str):
        return _quote(obj)
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{_quote(str(k))}: {_dumps(v)}"
                               for k, v in obj.items()) + "}"
    if isinstance(obj, (list, tuple)):
        return "[" + ", ".join(map(_dumps, obj)) + "]"
    if obj is None or isinstance(obj, bool):
        return {None: "null", True: "true", False: "false"}[obj]
    if isinstance(obj, int):
        return str(int(obj))
    raise TypeError(f"cannot encode {type(obj).__name__}")


TYPE_CHECKING = False
if TYPE_CHECKING:      # typing costs start-up time; only mypy needs it
    from typing import Any, TextIO

# Kept in step with kuryr_supervisor.cni.protocol by a unit test; duplicated
# because this file must run on its own.
SUPPORTED_VERSIONS = ("0.3.1", "0.4.0", "1.0.0", "1.1.0")
LATEST = SUPPORTED_VERSIONS[-1]
DEFAULT_SOCKET = "unix:///run/kuryr-supervisor/cni.sock"
DEFAULT_TIMEOUT = {"ADD": 120.0}
OTHER_TIMEOUT = 60.0
CNI_KEYS = ("CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME",
            "CNI_ARGS", "CNI_PATH")
#: W3C trace context, forwarded as HTTP headers when the runtime sets them.
TRACE_VARS = ("TRACEPARENT", "TRACESTATE")
TRY_AGAIN, DECODE, INVALID_CONFIG, INTERNAL = 11, 6, 7, 100
_MAX_ANSWER = 16 << 20


class ShimError(Exception):
    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code, self.msg, self.details = code, msg, details


def _connect(address: str, timeout: float) -> _socket.socket:
    """A connected socket to ``unix:///path`` or ``[http://]host:port``."""
    if address.startswith("unix:"):
        path = address[len("unix:"):]
        path = "/" + path.lstrip("/") if path.startswith("//") else path
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(path)
            _check_peer(sock, address)
        except BaseException:
            sock.close()
            raise
        return sock
    import socket  # TCP (Kuryr's compatibility bind) only: pay it there
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    return socket.create_connection((host.strip("[]"), int(port)), timeout)


#: The uid that must serve the daemon's Unix socket (a name for the tests).
REQUIRED_UID = 0


def _check_peer(sock: _socket.socket, address: str) -> None:
    """Refuse a socket whose listener is not root (``SO_PEERCRED``).

    Whoever could replace the socket file must neither read the runtime's
    request nor forge its result; the request is not sent.
    """
    cred = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    pid = int.from_bytes(cred[0:4], sys.byteorder)
    uid = int.from_bytes(cred[4:8], sys.byteorder)
    if uid != REQUIRED_UID:
        raise ShimError(TRY_AGAIN, "kuryr-supervisor socket is not served by root",
                        f"{address}: peer uid {uid} (pid {pid}), not "
                        f"{REQUIRED_UID}; request not sent")


def _version_of(netconf: Any) -> str:
    version = netconf.get("cniVersion") if isinstance(netconf, dict) else None
    return version if version in SUPPORTED_VERSIONS else LATEST


def call_daemon(address: str, data: bytes, timeout: float,
                headers: dict[str, str]) -> tuple[int, bytes]:
    """POST the JSON ``data``; (HTTP status, body). ShimError(11) if
    unreachable.

    A minimal HTTP/1.0 client (the daemon closes after each answer):
    http.client would pull in the email package and double start-up time.
    ``timeout`` bounds the whole exchange, not each read.
    """
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = (f"POST /cni HTTP/1.0\r\nHost: localhost\r\n"
               f"Content-Type: application/json\r\n"
               f"Content-Length: {len(data)}\r\n{head}\r\n").encode() + data
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    try:
        sock = _connect(address, timeout)
        try:
            sock.sendall(request)
            # Half-close: the server sees the request is complete at once
            # (werkzeug otherwise waits 10 ms for more input before closing).
            sock.shutdown(_socket.SHUT_WR)
            size = 0
            while size <= _MAX_ANSWER:
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            sock.close()
    except ShimError:
        raise
    except _socket.timeout as exc:
        raise ShimError(TRY_AGAIN, "kuryr-supervisor did not answer in time",
                        f"{address}: no answer within {timeout:g} s") from exc
    except (OSError, ValueError) as exc:
        raise ShimError(TRY_AGAIN, "kuryr-supervisor is unreachable",
                        f"{address}: {exc}") from exc
    answer = b"".join(chunks)
    status_line, _, rest = answer.partition(b"\r\n")
    _, _, body_bytes = rest.partition(b"\r\n\r\n")
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise ShimError(TRY_AGAIN, "kuryr-supervisor is unreachable",
                        f"{address}: no valid HTTP answer")
    return int(parts[1]), body_bytes


#: Longest timeout a netconf may ask for (a day); beyond it is a mistake.
MAX_TIMEOUT = 86400


def run(environ: dict[str, str], stdin_text: str) -> tuple[int, str]:
    """One CNI invocation: (exit status, text for stdout)."""
    command = environ.get("CNI_COMMAND", "")
    try:
        netconf = _loads(stdin_text) if stdin_text.strip() else {}
    except (ValueError, RecursionError) as exc:   # deep nesting: not a netconf
        if command == "VERSION":
            netconf = {}
        else:
            return _error(LATEST, DECODE, "network configuration is not JSON",
                          str(exc))
    version = _version_of(netconf)
    if command == "VERSION":
        return 0, _dumps({"cniVersion": version,
                              "supportedVersions": list(SUPPORTED_VERSIONS)})
    if not isinstance(netconf, dict):
        return _error(version, DECODE, "network configuration must be an object")
    address = netconf.get("daemon_socket", DEFAULT_SOCKET)
    timeout = netconf.get("timeout", DEFAULT_TIMEOUT.get(command, OTHER_TIMEOUT))
    if (not isinstance(address, str) or isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not 0 < timeout <= MAX_TIMEOUT):   # also refuses NaN, inf
        return _error(version, INVALID_CONFIG,
                      "daemon_socket must be a string, timeout a number of "
                      f"seconds in (0, {MAX_TIMEOUT}]")
    env = {k: environ[k] for k in CNI_KEYS if k in environ}
    headers = {k.lower(): environ[k] for k in TRACE_VARS
               if environ.get(k, "").isprintable() and environ.get(k)}
    # The netconf goes on as the runtime wrote it: it is valid JSON (parsed
    # above), and re-encoding it would cost time and could change nothing.
    config = stdin_text if stdin_text.strip() else "{}"
    data = f'{{"env": {_dumps(env)}, "config": {config}}}'.encode(
        "utf-8", "surrogateescape")
    try:
        status, body = call_daemon(address, data, float(timeout), headers)
    except ShimError as exc:
        return _error(version, exc.code, exc.msg, exc.details)
    text = body.decode("utf-8", "replace").strip()
    if 200 <= status < 300:
        return 0, text
    try:
        answer = _loads(text)
        if not isinstance(answer, dict) or "code" not in answer:
            raise ValueError("not a CNI error object")
    except ValueError:
        return _error(version, INTERNAL, f"kuryr-supervisor answered HTTP {status}",
                      text[:500])
    return 1, text


def _error(version: str, code: int, msg: str, details: str = "") -> tuple[int, str]:
    return 1, _dumps({"cniVersion": version, "code": code, "msg": msg,
                          "details": details})


def main(argv: list[str] | None = None, *, stdin: TextIO | None = None,
         stdout: TextIO | None = None,
         environ: dict[str, str] | None = None) -> int:
    """Entry point of ``/opt/cni/bin/kuryr-cni`` and the console script."""
    del argv  # CNI passes everything through the environment and stdin
    stdin = stdin if stdin is not None else sys.stdin
    stdout = stdout if stdout is not None else sys.stdout
    env = dict(os.environ if environ is None else environ)
    try:
        text = stdin.read()
    except (OSError, UnicodeDecodeError) as exc:
        status, output = _error(LATEST, DECODE, "cannot read stdin", str(exc))
    else:
        status, output = run(env, text)
    if output:
        stdout.write(output + "\n")
        stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
