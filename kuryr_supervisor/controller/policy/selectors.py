"""Label selectors (``metav1.LabelSelector``) in one canonical form.

Two policies that name the same set of pods must share one address group,
so a selector is reduced to what it means: ``matchLabels`` entries become
``In`` requirements of one value, requirements are deduplicated and
sorted, values sorted. ``{matchLabels: {a: x}}`` and ``{matchExpressions:
[{key: a, operator: In, values: [x]}]}`` are one selector.

A selector the API's validation would refuse (an unknown operator, ``In``
without values, a value that is not a string) is *invalid* and matches
nothing: the API server never stores one, and matching nothing is the
reading that never admits what a tenant did not write.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

#: Operators and whether they take values.
OPERATORS = {"In": True, "NotIn": True, "Exists": False,
             "DoesNotExist": False}
#: Requirements and values kept of one selector at most (hostile input).
MAX_ITEMS = 256

Requirement = tuple[str, str, tuple[str, ...]]


@dataclasses.dataclass(frozen=True)
class Selector:
    """Requirements ANDed (none: every object), or invalid (none)."""

    requirements: tuple[Requirement, ...] = ()
    valid: bool = True

    @property
    def everything(self) -> bool:
        return self.valid and not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        if not self.valid:
            return False
        for key, op, values in self.requirements:
            present = key in labels
            if op == "In" and not (present and labels[key] in values):
                return False
            if op == "NotIn" and present and labels[key] in values:
                return False
            if op == "Exists" and not present:
                return False
            if op == "DoesNotExist" and present:
                return False
        return True

    def canonical(self) -> list[Any]:
        """A JSON-able form: equal for selectors that mean the same."""
        if not self.valid:
            return ["invalid"]
        return [[k, op, list(v)] for k, op, v in self.requirements]


INVALID = Selector(valid=False)
EVERYTHING = Selector()


def _strings(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list) or len(value) > MAX_ITEMS or \
            not all(isinstance(v, str) for v in value):
        return None
    return tuple(sorted(set(value)))


def selector(value: Any) -> Selector:
    """``value`` (a LabelSelector as the API serves it) as a
    :class:`Selector`; ``None`` or ``{}``: every object."""
    if value is None:
        return EVERYTHING
    if not isinstance(value, Mapping):
        return INVALID
    reqs: set[Requirement] = set()
    labels = value.get("matchLabels") or {}
    exprs = value.get("matchExpressions") or []
    if not isinstance(labels, Mapping) or not isinstance(exprs, list) or \
            len(labels) + len(exprs) > MAX_ITEMS:
        return INVALID
    for key, val in labels.items():
        if not isinstance(key, str) or not isinstance(val, str):
            return INVALID
        reqs.add((key, "In", (val,)))
    for expr in exprs:
        if not isinstance(expr, Mapping):
            return INVALID
        key, op = expr.get("key"), expr.get("operator")
        values = _strings(expr.get("values") or [])
        if not isinstance(key, str) or not isinstance(op, str) or \
                op not in OPERATORS or values is None \
                or bool(values) != OPERATORS[op]:
            return INVALID
        reqs.add((key, op, values))
    return Selector(tuple(sorted(reqs)))
