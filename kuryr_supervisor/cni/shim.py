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
- a daemon that is not there (no socket file, connection refused, reset or
  closed before one byte of an answer) is tried again with jittered
  exponential backoff until the deadline, with one line on stderr: a daemon
  restart costs the pod latency, not an error. ``timeout`` bounds the whole
  call, retries included; then it is error code 11 (try again later), never
  a hang past ``timeout`` and never a traceback. Nothing is sent again once
  a byte of an answer arrived (an answer is final), nor after a time-out of
  an accepted request, nor to a socket root does not serve;
- a 2xx answer that is not a valid CNI result for the command (not JSON, no
  matching ``cniVersion``, an ADD without an address, a body where DEL,
  CHECK, GC or STATUS print nothing) is error code 999 with the reason,
  never passed on as a success;
- a ``CNI_*`` variable that is not UTF-8 is error code 4, answered here
  (the daemon answers the same).

Netconf keys read here: ``daemon_socket`` (``unix:///path``, default
``unix:///run/kuryr-supervisor/cni.sock``, or ``host:port`` /
``http://host:port``) and ``timeout`` (seconds; default 120 for ADD, 60
otherwise).

STATUS is bounded by :data:`STATUS_TIMEOUT` (2 s) whatever ``timeout``
says, and a daemon that is not there (or not in time) is error code 50
(the plugin is not available, spec 1.1) rather than 11: a runtime calls
STATUS every few seconds and waits for it, and a STATUS that rode out a
stopped daemon for a minute would hold the runtime's status call (and the
kubelet's node status) that long.
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


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class _StrictContext(_Context):
    """A daemon's result is read as RFC 8259 JSON: no NaN or Infinity."""

    parse_constant = staticmethod(_no_constant)


_scan = _make_scanner(_Context())  # type: ignore[arg-type]
_scan_strict = _make_scanner(_StrictContext())  # type: ignore[arg-type]


def _loads(text: str, scan: Any = _scan) -> Any:
    """``json.loads`` of a str: the same scanner, ValueError on bad input."""
    text = text.strip(" \t\n\r")
    try:
        value, end = scan(text, 0)
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
    from collections.abc import Callable
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
#: STATUS: the plugin cannot serve an ADD now (no daemon answers).
NOT_AVAILABLE = 50
#: Seconds a STATUS waits for the daemon at most (see the module).
STATUS_TIMEOUT = 2.0
INVALID_ENVIRONMENT = 4
#: A 2xx answer that is not a valid CNI result (plugin code).
INVALID_RESULT = 999
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


class _NoAnswer(Exception):
    """No daemon took the request and not a byte of an answer came: safe to
    send again. Its argument names what happened."""


#: The failures that say no daemon is there right now (not yet started,
#: restarting, its listen backlog full), by errno (ENOENT, ECONNREFUSED,
#: ECONNRESET, EPIPE, EAGAIN on Linux), in the words both shims log.
_ABSENT = {2: "no socket file", 111: "connection refused",
           104: "connection reset", 32: "broken pipe", 11: "listen backlog full"}
#: Backoff between attempts: the first pause, the longest, and the least
#: time worth a last attempt before the deadline.
FIRST_PAUSE, LONGEST_PAUSE, LAST_ATTEMPT = 0.02, 1.0, 0.01
_COMMANDS = ("ADD", "DEL", "CHECK", "GC", "STATUS")


def _exchange(address: str, request: bytes, deadline: float,
              clock: Callable[[], float]) -> bytes:
    """One attempt: connect, send, read to EOF; the answer's bytes.

    _NoAnswer when nothing of an answer came and the failure says no daemon
    was there; any other failure propagates (a time-out, the peer check).
    A peer that closed while we wrote may still have answered (an early
    error): what it wrote is read, and only nothing at all is no answer.
    """
    try:
        sock = _connect(address, max(deadline - clock(), 0.001))
    except OSError as exc:
        if exc.errno not in _ABSENT:        # a time-out has no errno
            raise
        raise _NoAnswer(_ABSENT[exc.errno or 0]) from exc
    answer, unsent = bytearray(), ""
    try:
        try:
            sock.sendall(request)
            # Half-close: the server sees the request is complete at once
            # (werkzeug otherwise waits 10 ms for more input before closing).
            sock.shutdown(_socket.SHUT_WR)
        except (ConnectionResetError, BrokenPipeError) as exc:
            unsent = _ABSENT.get(exc.errno or 0, "broken pipe")
        while len(answer) <= _MAX_ANSWER:
            sock.settimeout(max(deadline - clock(), 0.001))
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    except ConnectionResetError:
        if answer:              # part of an answer came: it is final
            raise
        unsent = unsent or "connection reset"
    finally:
        sock.close()
    if not answer:
        raise _NoAnswer(unsent or "closed before answering")
    return bytes(answer)


def _warn(line: str) -> None:
    """One line on stderr, which runtimes capture from plugins."""
    sys.stderr.write(f"kuryr-cni: {line}\n")
    sys.stderr.flush()


def call_daemon(address: str, data: bytes, timeout: float,
                headers: dict[str, str], *, command: str = "",
                log: Callable[[str], None] = _warn,
                clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], object] = time.sleep
                ) -> tuple[int, bytes]:
    """POST the JSON ``data``; (HTTP status, body). ShimError(11) if
    unreachable until the deadline.

    A minimal HTTP/1.0 client (the daemon closes after each answer):
    http.client would pull in the email package and double start-up time.
    ``timeout`` bounds the whole call, retries included. A daemon that is
    not there is tried again after a pause (equal jitter: half the backoff
    plus a random part of the other half, from os.urandom since ``random``
    costs start-up; 20 ms doubling to 1 s), so a restart costs latency;
    the first retry is logged, once. ``clock`` and ``sleep`` are a test's
    (a fake clock: the backoff without the wait).
    """
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = (f"POST /cni HTTP/1.0\r\nHost: localhost\r\n"
               f"Content-Type: application/json\r\n"
               f"Content-Length: {len(data)}\r\n{head}\r\n").encode() + data
    started = clock()
    deadline, pause, attempts = started + timeout, FIRST_PAUSE, 1
    while True:
        try:
            answer = _exchange(address, request, deadline, clock)
            break
        except _NoAnswer as exc:
            left = deadline - clock()
            if left <= LAST_ATTEMPT:
                raise ShimError(
                    TRY_AGAIN, "kuryr-supervisor is unreachable",
                    f"{address}: {exc}; {attempts} attempt{'s' * (attempts > 1)}"
                    f" in {clock() - started:.1f} s") from None
            if attempts == 1:   # the runtime's command, never its raw bytes
                log(f"{command if command in _COMMANDS else 'call'}: "
                    f"kuryr-supervisor at {address} is not there ({exc}); "
                    f"retrying for up to {timeout:g} s")
            sleep(min(pause * (1 + os.urandom(1)[0] / 256) / 2,
                      left - LAST_ATTEMPT))
            pause, attempts = min(pause * 2, LONGEST_PAUSE), attempts + 1
        except _socket.timeout as exc:
            raise ShimError(TRY_AGAIN, "kuryr-supervisor did not answer in time",
                            f"{address}: no answer within {timeout:g} s") from exc
        except (OSError, ValueError) as exc:
            raise ShimError(TRY_AGAIN, "kuryr-supervisor is unreachable",
                            f"{address}: {exc}") from exc
    return _parse_answer(address, answer)


def _parse_answer(address: str, answer: bytes) -> tuple[int, bytes]:
    """(status, body) of an HTTP/1.x answer read to EOF; ShimError(11) if
    it is not one or was cut short (its Content-Length not met)."""
    head, end, body = answer.partition(b"\r\n\r\n")
    status, *fields = head.split(b"\r\n")
    parts = status.split(None, 2)
    lengths = [value.strip() for name, _, value in
               (field.partition(b":") for field in fields)
               if name.strip().lower() == b"content-length"]
    if (not end or len(parts) < 2 or not parts[0].startswith(b"HTTP/")
            or len(parts[1]) != 3 or not parts[1].isdigit()
            or any(n != b"%d" % len(body) for n in lengths)):
        raise ShimError(TRY_AGAIN, "kuryr-supervisor is unreachable",
                        f"{address}: no valid HTTP answer")
    return int(parts[1]), body


#: Longest timeout a netconf may ask for (a day); beyond it is a mistake.
MAX_TIMEOUT = 86400


def _listed(value: Any, key: str) -> bool:
    """A list of objects, each with a string under ``key``."""
    return isinstance(value, list) and all(
        isinstance(item, dict) and isinstance(item.get(key), str) for item in value)


def result_problem(command: str, requested: Any, body: bytes) -> str:
    """Why a 2xx answer ``body`` is not a valid result of ``command`` ("" if
    it is one), so that a garbled answer is never passed on as a success.

    Only ADD prints a result; DEL, CHECK, GC and STATUS print nothing on
    success. An ADD result is a JSON object in the request's cniVersion
    with at least one address (``ips``: what the runtime gives the pod),
    each in CIDR notation, pointing, if at all, into ``interfaces``, with
    ``version`` "4" or "6" before 1.0.0; ``interfaces``, ``routes`` and
    ``dns`` have their spec's shapes (null is absent). Kept in step with
    resultProblem in cmd/kuryr-cni: the same table tests both.
    """
    if command != "ADD":
        return (f"{command} prints nothing on success, but the answer had "
                f"{len(body)} bytes") if body else ""
    try:
        result = _loads(body.decode("utf-8"), _scan_strict) if body else None
    except UnicodeDecodeError:
        return "the result is not UTF-8"
    except (ValueError, RecursionError):
        return "the result is not JSON"
    if not isinstance(result, dict):
        return "the result is not a JSON object" if body else "the answer has no result"
    r = {"interfaces": [], "routes": [], "dns": {},
         **{k: v for k, v in result.items() if v is not None}}
    version, ips = r.get("cniVersion"), r.get("ips")
    if not isinstance(version, str):
        return "the result has no cniVersion"
    if version != requested:
        return (f"the result's cniVersion {version} is not the request's "
                f"{requested if isinstance(requested, str) else 'none'}")
    if not _listed(r["interfaces"], "name"):
        return "interfaces must be a list of objects with a name"
    if not isinstance(ips, list) or not ips:
        return "the result has no ips (an ADD gives the pod an address)"
    for n, ip in enumerate(ips):
        ip = ip if isinstance(ip, dict) else {}
        index = ip.get("interface")
        if not isinstance(ip.get("address"), str) or "/" not in ip["address"]:
            return f"ips[{n}] has no address in CIDR notation"
        if index is not None and (type(index) is not int
                                  or not 0 <= index < len(r["interfaces"])):
            return f"ips[{n}].interface is not an index into interfaces"
        if version in ("0.3.1", "0.4.0") and ip.get("version") not in ("4", "6"):
            return f'ips[{n}].version must be "4" or "6" in {version}'
    if not _listed(r["routes"], "dst"):
        return "routes must be a list of objects with a dst"
    return "" if isinstance(r["dns"], dict) else "dns must be an object"


def _is_utf8(value: str) -> bool:
    """False for a lone surrogate: how Python decodes a non-UTF-8 byte."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def run(environ: dict[str, str], stdin_text: str, *,
        log: Callable[[str], None] = _warn) -> tuple[int, str]:
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
    for key, value in env.items():
        if not _is_utf8(value):     # the daemon's own check, and its words
            return _error(version, INVALID_ENVIRONMENT,
                          f"{key} is not valid UTF-8")
    headers = {k.lower(): environ[k] for k in TRACE_VARS
               if environ.get(k, "").isprintable() and environ.get(k)}
    # The netconf goes on as the runtime wrote it: it is valid JSON (parsed
    # above), and re-encoding it would cost time and could change nothing.
    config = stdin_text if stdin_text.strip() else "{}"
    data = f'{{"env": {_dumps(env)}, "config": {config}}}'.encode(
        "utf-8", "surrogateescape")
    if command == "STATUS":
        timeout = min(timeout, STATUS_TIMEOUT)
    try:
        status, body = call_daemon(address, data, float(timeout), headers,
                                   command=command, log=log)
    except ShimError as exc:
        code = exc.code
        if command == "STATUS" and code == TRY_AGAIN:
            code = NOT_AVAILABLE
        return _error(version, code, exc.msg, exc.details)
    if 200 <= status < 300:
        body = body.strip(b" \t\n\r")
        problem = result_problem(command, netconf.get("cniVersion"), body)
        if problem:
            return _error(version, INVALID_RESULT,
                          f"kuryr-supervisor answered HTTP {status} with an "
                          f"invalid {command} result", problem)
        return 0, body.decode()
    text = body.decode("utf-8", "replace").strip()
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
