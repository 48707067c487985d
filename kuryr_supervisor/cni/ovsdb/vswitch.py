"""The node's Open vSwitch database as the OVS binding uses it: ports on
the integration bridge, our Interfaces, and what the node is.

:class:`Ovsdb` holds one :class:`~.connection.Connection` whose monitor
covers only what the binding and the health checks read:

* ``Open_vSwitch``'s ``external_ids`` (``system-id``, ``ovn-remote``,
  ``ovn-encap-ip``, ...: :meth:`Ovsdb.node`);
* the integration bridge's row (``name``, ``datapath_type``);
* our own Ports and Interfaces only, those whose ``external_ids`` carry
  :data:`MARK` (``kuryr-supervisor=cni``): ``name``, ``external_ids``
  (``ovn-installed``...), ``ofport`` and ``error``.

Writes are single transactions (a port, its Interface and both rows'
``external_ids`` appear at once or not at all) that never wait for
ovs-vswitchd (the database is the contract: OVN's controller or the OVS
agent reads it). Reads that must prove the database answers (the readiness
check, CHECK, GC) ask it; the rest read the monitor.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kuryr_supervisor.cni.ovsdb import wire
from kuryr_supervisor.cni.ovsdb.connection import Connection, OvsdbError
from kuryr_supervisor.cni.ovsdb.rows import (
    Kind,
    Replica,
    Row,
    Table,
    decode,
    map_json,
    set_json,
    uuid_json,
)

DATABASE = "Open_vSwitch"
#: The external_ids key (and value) that marks our Ports and Interfaces.
MARK = ("kuryr-supervisor", "cni")
#: What ovn-controller sets on an Interface once the port's flows are in.
OVN_INSTALLED = "ovn-installed"

T = TypeVar("T")


def _ours() -> tuple[Any, ...]:
    return (["external_ids", "includes", map_json(dict([MARK]))],)


def tables(bridge: str) -> tuple[Table, ...]:
    """The monitor of an :class:`Ovsdb` for ``bridge``."""
    return (
        Table("Open_vSwitch", {"external_ids": Kind.MAP}),
        Table("Bridge", {"name": Kind.ATOM, "datapath_type": Kind.ATOM},
              (["name", "==", bridge],)),
        Table("Port", {"name": Kind.ATOM}, _ours()),
        Table("Interface", {"name": Kind.ATOM, "external_ids": Kind.MAP,
                            "ofport": Kind.OPTIONAL, "error": Kind.OPTIONAL},
              _ours()),
    )


def _select(table: str, where: list[Any], columns: list[str]
            ) -> dict[str, Any]:
    return {"op": "select", "table": table, "where": where,
            "columns": columns}


def _named(name: str) -> list[Any]:
    return [["name", "==", name]]


class Ovsdb:
    """The node's database over one held connection (see the module
    docstring); ``bridge`` is the integration bridge. Every call bounded
    by ``timeout`` seconds."""

    def __init__(self, connection: str, timeout: float = 5.0, *,
                 bridge: str = "br-int",
                 connect: Callable[[str, float], Any] = wire.connect) -> None:
        self.connection = connection
        self.timeout = timeout
        self.bridge_name = bridge
        self.db = Connection(connection, DATABASE, tables(bridge),
                             timeout=timeout, connect=connect)

    def close(self) -> None:
        """Disconnect; the next call connects again."""
        self.db.close()

    # -- asked of the database -----------------------------------------------
    def bridge(self, name: str) -> dict[str, Any] | None:
        """The bridge's ``name`` and ``datapath_type``; None if missing."""
        [found] = self.db.transact(_select("Bridge", _named(name),
                                           ["name", "datapath_type"]))
        rows = found.get("rows", [])
        return dict(rows[0]) if rows else None

    def ports(self, bridge: str) -> list[str]:
        """Names of the ports of ``bridge`` but its local one (OvsdbError
        "no bridge named" when it is gone)."""
        found, every = self.db.transact(
            _select("Bridge", _named(bridge), ["ports"]),
            _select("Port", [], ["_uuid", "name"]))
        if not found.get("rows"):
            raise OvsdbError(f"no bridge named {bridge}")
        mine = set(decode(Kind.SET, found["rows"][0]["ports"]))
        return sorted(str(r["name"]) for r in every.get("rows", [])
                      if decode(Kind.ATOM, r["_uuid"]) in mine
                      and r["name"] != bridge)    # its local port, as
        # ``ovs-vsctl list-ports`` leaves it out

    def interface(self, name: str) -> dict[str, Any] | None:
        """The Interface ``name`` (name, external_ids, mtu_request)."""
        [found] = self.db.transact(_select(
            "Interface", _named(name), ["name", "external_ids",
                                        "mtu_request"]))
        rows = found.get("rows", [])
        if not rows:
            return None
        row = rows[0]
        return {"name": row["name"],
                "external_ids": decode(Kind.MAP, row["external_ids"]),
                "mtu_request": decode(Kind.OPTIONAL, row["mtu_request"])}

    def our_interfaces_now(self) -> list[Row]:
        """Every Interface of ours as the database has it now (``_uuid``,
        name, external_ids, ofport): asked, not the monitor's, so a row
        whose deletion committed before the call is never in it, however
        late the monitor's update comes."""
        [found] = self.db.transact(_select(
            "Interface", list(_ours()),
            ["_uuid", "name", "external_ids", "ofport"]))
        return [{"_uuid": decode(Kind.ATOM, r["_uuid"]), "name": r["name"],
                 "external_ids": decode(Kind.MAP, r["external_ids"]),
                 "ofport": decode(Kind.OPTIONAL, r["ofport"])}
                for r in found.get("rows", [])]

    def marked(self, key: str, value: str) -> list[str]:
        """Names of the Interfaces whose external_ids has key=value."""
        [found] = self.db.transact(_select(
            "Interface", [["external_ids", "includes",
                           map_json({key: value})]], ["name"]))
        return [str(r["name"]) for r in found.get("rows", [])]

    # -- writes ----------------------------------------------------------------
    def add_port(self, bridge: str, name: str,
                 external_ids: Mapping[str, str], mtu: int, *,
                 internal_mac: str = "") -> None:
        """Add ``name`` to ``bridge`` with its Interface's external_ids
        and MTU, in one transaction; a port of that name already on that
        bridge is updated in place. ``internal_mac``: an internal port
        (``type=internal``: ovs-vswitchd makes its interface) with that
        MAC. OvsdbError "no bridge named" when the bridge is missing."""
        self.begin_add_port(bridge, name, external_ids, mtu,
                            internal_mac=internal_mac)()

    def begin_add_port(self, bridge: str, name: str,
                       external_ids: Mapping[str, str], mtu: int, *,
                       internal_mac: str = "") -> Callable[[], None]:
        """:meth:`add_port` sent now, finished (and its errors raised) by
        calling what is returned: the caller works meanwhile."""
        mark = dict([MARK])
        row = _interface_row(external_ids, mtu, internal_mac)
        sent = self.db.begin(
            _bridge_exists(bridge),
            {"op": "insert", "table": "Interface", "uuid-name": "iface",
             "row": {"name": name, **row}},
            {"op": "insert", "table": "Port", "uuid-name": "port",
             "row": {"name": name, "external_ids": map_json(mark),
                     "interfaces": ["named-uuid", "iface"]}},
            {"op": "mutate", "table": "Bridge", "where": _named(bridge),
             "mutations": [["ports", "insert",
                            set_json([["named-uuid", "port"]])]]},
            _comment(f"add port {name} to {bridge}"))

        def finish() -> None:
            try:
                sent()
            except OvsdbError as exc:
                text = str(exc)
                if text.startswith("wait Bridge"):
                    raise OvsdbError(f"no bridge named {bridge}") from exc
                if "constraint violation" not in text:
                    raise
                self._update_port(bridge, name, row)
        return finish

    def _update_port(self, bridge: str, name: str,
                     row: Mapping[str, Any]) -> None:
        """``--may-exist``: the port is there already; set its Interface."""
        if name not in self.ports(bridge):
            raise OvsdbError(f"port {name} exists, not on bridge {bridge}")
        self.db.transact(
            {"op": "update", "table": "Interface", "where": _named(name),
             "row": dict(row)},
            _comment(f"update port {name} on {bridge}"))

    def del_port(self, bridge: str, name: str) -> None:
        """Remove port ``name`` from ``bridge``; fine if it is not there
        (or the bridge is gone). One round trip for a port of ours the
        monitor knows; a port it does not know is looked up first."""
        uuid = self.db.read(lambda r: next(
            (row["_uuid"] for row in r.find("Port", name=name)), None))
        if uuid is None:
            [found] = self.db.transact(_select("Port", _named(name),
                                               ["_uuid"]))
            rows = found.get("rows", [])
            if not rows:
                return
            uuid = decode(Kind.ATOM, rows[0]["_uuid"])
        self.db.transact(
            {"op": "mutate", "table": "Bridge", "where": _named(bridge),
             "mutations": [["ports", "delete", set_json([uuid_json(uuid)])]]},
            _comment(f"delete port {name} from {bridge}"))

    # -- the monitor -------------------------------------------------------------
    def node(self) -> dict[str, str]:
        """``Open_vSwitch``'s external_ids (what this node is)."""
        return self.db.read(lambda r: dict(next(
            (row["external_ids"] for row in r.find("Open_vSwitch")), {})))

    def datapath_type(self, bridge: str | None = None) -> str | None:
        """The bridge's datapath_type ("" is the kernel's); None when the
        bridge is missing. The monitor's for the integration bridge, asked
        of the database for any other."""
        if bridge is not None and bridge != self.bridge_name:
            row = self.bridge(bridge)
            return None if row is None else str(row["datapath_type"])
        return self.db.read(lambda r: next(
            (str(row["datapath_type"]) for row in r.find("Bridge")), None))

    def our_interfaces(self) -> list[Row]:
        """Every Interface of ours as the monitor has it (copies)."""
        return self.db.read(lambda r: [
            row for row in (_copy(x) for x in r.find("Interface"))
            if row is not None])

    def our_interface(self, name: str) -> Row | None:
        """Our Interface ``name`` as the monitor has it (a copy)."""
        return self.db.read(lambda r: _copy(_interface(r, name)))

    def owned_by(self, owner: str) -> list[Row]:
        """Our Interfaces whose ``external_ids:vm-uuid`` is ``owner`` (a
        pod's UID), as the monitor has them (copies)."""
        return self.db.read(lambda r: [
            row for row in (_copy(i) for i in r.find("Interface"))
            if row and (row.get("external_ids") or {}).get("vm-uuid") == owner])

    def set_iface_id(self, name: str, external_ids: Mapping[str, str],
                     iface_id: str) -> None:
        """Point Interface ``name`` at the Neutron port ``iface_id``: its
        ``external_ids`` as read, ``iface-id`` replaced, in one transaction
        that fails if they changed meanwhile."""
        self.db.transact(
            {"op": "wait", "table": "Interface", "where": _named(name),
             "columns": ["external_ids"], "until": "==",
             "rows": [{"external_ids": map_json(external_ids)}],
             "timeout": 0},
            {"op": "update", "table": "Interface", "where": _named(name),
             "row": {"external_ids": map_json(
                 {**external_ids, "iface-id": iface_id})}},
            _comment(f"point {name} at port {iface_id}"))

    def wait_interface(self, name: str, done: Callable[[Row], bool],
                       timeout: float) -> Row | None:
        """Our Interface ``name`` once ``done(row)``, woken by each update
        of the monitor; None after ``timeout`` seconds."""
        def found(rows: Replica) -> Row | None:
            row = _interface(rows, name)
            return _copy(row) if row is not None and done(row) else None
        return self.db.wait_for(found, timeout)

    def state(self) -> tuple[bool, str]:
        """(connected and current, the last error or "")."""
        return self.db.state()


def _interface(rows: Replica, name: str) -> Row | None:
    return next(rows.find("Interface", name=name), None)


def _copy(row: Row | None) -> Row | None:
    if row is None:
        return None
    return {k: dict(v) if isinstance(v, dict) else v for k, v in row.items()}


def _interface_row(external_ids: Mapping[str, str], mtu: int,
                   internal_mac: str) -> dict[str, Any]:
    """An Interface's columns we set (an internal port's type and MAC
    too)."""
    row: dict[str, Any] = {"mtu_request": mtu,
                           "external_ids": map_json(external_ids)}
    if internal_mac:
        row.update(type="internal", mac=set_json([internal_mac]))
    return row


def _bridge_exists(bridge: str) -> dict[str, Any]:
    """Fails the transaction at once (``wait`` with timeout 0) when the
    bridge is missing."""
    return {"op": "wait", "table": "Bridge", "where": _named(bridge),
            "columns": ["name"], "until": "==", "rows": [{"name": bridge}],
            "timeout": 0}


def _comment(text: str) -> dict[str, str]:
    return {"op": "comment", "comment": f"kuryr-supervisor: {text}"}
