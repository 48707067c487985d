"""OVSDB values in Python, the monitored tables, and their local copy.

Values: a map column is a ``dict``, a set column a ``list``, an optional
column (at most one value) the value or None, any other column its atom;
UUIDs are strings. :func:`map_json`, :func:`set_json` and
:func:`uuid_json` are the other way, for transactions.

:class:`Table` names what is monitored of one table (columns with their
kind, and a condition, ``monitor_cond``'s ``where``); :class:`Replica`
holds the rows the server sent and applies its ``update2`` notifications
(``initial``, ``insert``, ``modify`` with column diffs, ``delete``) as
RFC 7047's extension defines them: in a set or map column a diff toggles
each element (a map key whose value is unchanged is removed, a new or
changed one set); an optional column that had a value takes the diff as
its new value; any other column takes it as is.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping
from typing import Any


class Kind(enum.Enum):
    ATOM = "atom"
    OPTIONAL = "optional"
    SET = "set"
    MAP = "map"


@dataclasses.dataclass(frozen=True)
class Table:
    """What to monitor of ``name``: ``columns`` (name -> kind) of the
    rows matching ``where`` (RFC 7047 conditions; empty: every row)."""

    name: str
    columns: Mapping[str, Kind]
    where: tuple[Any, ...] = ()

    def request(self) -> dict[str, Any]:
        """This table's ``monitor_cond`` request."""
        req: dict[str, Any] = {"columns": sorted(self.columns)}
        if self.where:
            req["where"] = list(self.where)
        return req


Row = dict[str, Any]


def _atom(value: Any) -> Any:
    if isinstance(value, list) and len(value) == 2 and value[0] in (
            "uuid", "named-uuid"):
        return str(value[1])
    return value


def _elements(value: Any) -> list[Any]:
    """The elements of a set value (an atom is a set of one)."""
    if isinstance(value, list) and len(value) == 2 and value[0] == "set":
        return [_atom(v) for v in value[1]]
    return [_atom(value)]


def _pairs(value: Any) -> dict[Any, Any]:
    if isinstance(value, list) and len(value) == 2 and value[0] == "map":
        return {_atom(k): _atom(v) for k, v in value[1]}
    raise ValueError(f"not an OVSDB map: {value!r}")


def decode(kind: Kind, value: Any) -> Any:
    """An OVSDB JSON value as Python (see the module docstring)."""
    if kind is Kind.MAP:
        return _pairs(value)
    if kind is Kind.SET:
        return _elements(value)
    if kind is Kind.OPTIONAL:
        found = _elements(value)
        return found[0] if found else None
    return _atom(value)


def apply_diff(kind: Kind, old: Any, diff: Any) -> Any:
    """``old`` (Python) changed by an ``update2`` column diff (JSON)."""
    if kind is Kind.MAP:
        new = dict(old or {})
        for key, value in _pairs(diff).items():
            if key in new and new[key] == value:
                del new[key]
            else:
                new[key] = value
        return new
    if kind is Kind.SET or (kind is Kind.OPTIONAL and old is None):
        have = list(old or []) if kind is Kind.SET else []
        for element in _elements(diff):
            if element in have:
                have.remove(element)
            else:
                have.append(element)
        if kind is Kind.SET:
            return have
        return have[0] if have else None
    return decode(kind, diff)


def map_json(pairs: Mapping[str, str]) -> list[Any]:
    return ["map", [[k, v] for k, v in sorted(pairs.items())]]


def set_json(values: list[Any]) -> list[Any]:
    return ["set", list(values)]


def uuid_json(uuid: str) -> list[str]:
    return ["uuid", uuid]


class Replica:
    """The monitored rows: table -> uuid -> row (with ``_uuid``)."""

    def __init__(self, tables: tuple[Table, ...]) -> None:
        self.tables = {t.name: t for t in tables}
        self.rows: dict[str, dict[str, Row]] = {t.name: {} for t in tables}

    def reset(self, updates: Mapping[str, Any]) -> None:
        """Replace everything with a monitor reply's initial rows."""
        for name in self.rows:
            self.rows[name] = {}
        self.apply(updates)

    def apply(self, updates: Mapping[str, Any]) -> None:
        """Fold in one ``table-updates2`` object."""
        for name, changes in updates.items():
            table = self.tables.get(name)
            if table is None:
                continue
            rows = self.rows[name]
            for uuid, change in changes.items():
                self._change(table, rows, uuid, change)

    @staticmethod
    def _change(table: Table, rows: dict[str, Row], uuid: str,
                change: Mapping[str, Any]) -> None:
        if "delete" in change:
            rows.pop(uuid, None)
            return
        full = change.get("initial", change.get("insert"))
        if full is not None:
            row: Row = {c: decode(k, full[c]) if c in full else
                        _empty(k) for c, k in table.columns.items()}
            row["_uuid"] = uuid
            rows[uuid] = row
            return
        diff = change.get("modify")
        if diff is None:
            return
        row = rows.setdefault(uuid, {"_uuid": uuid, **{
            c: _empty(k) for c, k in table.columns.items()}})
        for column, value in diff.items():
            kind = table.columns.get(column)
            if kind is not None:
                row[column] = apply_diff(kind, row.get(column), value)

    def find(self, table: str, **match: Any) -> Iterator[Row]:
        """Rows of ``table`` whose columns equal ``match``."""
        for row in self.rows.get(table, {}).values():
            if all(row.get(k) == v for k, v in match.items()):
                yield row


def _empty(kind: Kind) -> Any:
    return {Kind.MAP: {}, Kind.SET: [], Kind.OPTIONAL: None}.get(kind, "")
