"""The OVSDB adapter: the only module that talks to Open vSwitch's database.

It drives ``ovs-vsctl`` (Debian's ``openvswitch-common``) as a subprocess,
one invocation per operation, so each operation is one OVSDB transaction
(a port, its Interface and the Interface's ``external_ids`` appear at once
or not at all) and no worker keeps an OVSDB connection across a fork.

Invariants:

* Every call is bounded twice: ``ovs-vsctl --timeout`` (it gives up on a
  database that does not answer) and the subprocess's own timeout a second
  later (it is killed if it still hangs, e.g. on a stopped ovsdb-server
  whose socket still accepts). Either way the caller gets
  :class:`OvsdbUnavailable`, never a hang.
* ``--no-wait``: no call waits for ovs-vswitchd to apply the change, so a
  stuck vswitchd cannot hold an ADD; the database is the contract (an
  ovn-controller or an OVS agent reads it).
* Failures leave here as :class:`OvsdbError` (the database refused or the
  tool failed) or :class:`OvsdbUnavailable` (unreachable or timed out);
  callers map them to CNI errors.
"""
from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from typing import Any

VSCTL = "ovs-vsctl"
#: ovs-vsctl's message when it cannot reach the database.
_UNREACHABLE = ("database connection failed", "timed out", "Connection refused",
                "No such file or directory")


class OvsdbError(Exception):
    """ovs-vsctl failed (the database refused the transaction, a name is
    wrong, the tool is missing)."""


class OvsdbUnavailable(OvsdbError):
    """ovsdb-server did not answer within the timeout, or is unreachable."""


class Ovsdb:
    """One database (``connection``), every call bounded by ``timeout``."""

    def __init__(self, connection: str, timeout: float = 5.0, *,
                 vsctl: str = VSCTL) -> None:
        self.connection = connection
        self.timeout = timeout
        self._vsctl = vsctl

    def run(self, *args: str) -> str:
        """Run one ovs-vsctl transaction; its standard output."""
        seconds = max(1, int(round(self.timeout)))
        cmd = [self._vsctl, f"--db={self.connection}", f"--timeout={seconds}",
               "--no-wait", *args]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True,
                                  timeout=seconds + 1.0, check=False)
        except subprocess.TimeoutExpired as exc:
            raise OvsdbUnavailable(
                f"OVSDB {self.connection} did not answer within "
                f"{seconds} s") from exc
        except OSError as exc:
            raise OvsdbError(f"cannot run {self._vsctl}: {exc}") from exc
        if done.returncode != 0:
            msg = done.stderr.strip().splitlines()
            text = msg[-1] if msg else f"exit status {done.returncode}"
            text = text.removeprefix("ovs-vsctl: ")
            if "Alarm clock" in text or done.returncode < 0:
                # --timeout ends ovs-vsctl with SIGALRM.
                raise OvsdbUnavailable(
                    f"OVSDB {self.connection} did not answer within "
                    f"{seconds} s")
            if any(s in text for s in _UNREACHABLE):
                raise OvsdbUnavailable(f"OVSDB {self.connection}: {text}")
            raise OvsdbError(text)
        return done.stdout

    # -- reads ---------------------------------------------------------------
    def find(self, table: str, columns: tuple[str, ...],
             *conditions: str) -> list[dict[str, Any]]:
        """Rows of ``table`` matching every condition, as dicts."""
        out = self.run("--format=json", f"--columns={','.join(columns)}",
                       "find", table, *conditions)
        doc = json.loads(out)
        heads = doc.get("headings", [])
        return [{h: _decode(v) for h, v in zip(heads, row, strict=False)}
                for row in doc.get("data", [])]

    def bridge(self, name: str) -> dict[str, Any] | None:
        """The bridge's ``name`` and ``datapath_type``; None if missing."""
        rows = self.find("Bridge", ("name", "datapath_type"), f"name={name}")
        return rows[0] if rows else None

    def ports(self, bridge: str) -> list[str]:
        """Names of the ports of ``bridge`` (an OvsdbError if it is gone)."""
        return self.run("list-ports", bridge).split()

    def interface(self, name: str) -> dict[str, Any] | None:
        """The Interface ``name`` (name, external_ids, mtu_request)."""
        rows = self.find("Interface", ("name", "external_ids", "mtu_request"),
                         f"name={name}")
        return rows[0] if rows else None

    def marked(self, key: str, value: str) -> list[str]:
        """Names of the Interfaces whose external_ids has key=value."""
        return [str(r["name"]) for r in self.find(
            "Interface", ("name",), f"external_ids:{key}={_quote(value)}")]

    # -- writes --------------------------------------------------------------
    def add_port(self, bridge: str, name: str,
                 external_ids: Mapping[str, str], mtu: int) -> None:
        """Add ``name`` to ``bridge`` with its Interface's external_ids
        and MTU, in one transaction (an existing port of that name on that
        bridge is updated in place)."""
        sets = [f"external_ids:{k}={_quote(v)}"
                for k, v in sorted(external_ids.items())]
        self.run("--may-exist", "add-port", bridge, name, "--", "set",
                 "Interface", name, *sets, f"mtu_request={mtu}")

    def del_port(self, bridge: str, name: str) -> None:
        """Remove port ``name`` from ``bridge``; fine if it is not there."""
        self.run("--if-exists", "del-port", bridge, name)


def _quote(value: str) -> str:
    """An OVSDB string atom, always quoted (so ':' or '=' in it is data)."""
    return json.dumps(value)


def _decode(value: Any) -> Any:
    """ovs-vsctl's JSON: ``["map", [[k, v]...]]``, ``["set", [...]]``,
    ``["uuid", u]`` or a plain atom."""
    if isinstance(value, list) and len(value) == 2:
        kind, data = value
        if kind == "map":
            return {str(k): _decode(v) for k, v in data}
        if kind == "set":
            return [_decode(v) for v in data]
        if kind == "uuid":
            return str(data)
    return value
