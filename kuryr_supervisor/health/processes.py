"""The only module that imports psutil: per-process memory figures.

USS (unique set size) is used throughout because the workers are forked from
the master: pages they still share copy-on-write would be counted once per
process by RSS, but belong to no single one of them.

Invariant: nothing here raises for a process that vanished or cannot be read;
the figure is ``None`` (or left out of a sum) instead, because a worker may die
between listing and measuring at any instant.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import psutil


class ProcessLike(Protocol):
    """The part of :class:`psutil.Process` used here (tests inject their own)."""

    pid: int

    def memory_full_info(self) -> Any: ...

    def children(self, recursive: bool = False) -> Iterable[ProcessLike]: ...


ProcessFactory = Callable[[int], ProcessLike]

#: Errors meaning "this process cannot be measured" (gone, zombie, denied).
_UNMEASURABLE = (psutil.Error, OSError, AttributeError)


@dataclasses.dataclass(frozen=True)
class TreeMemory:
    """The USS sum over a process tree and how many processes it covers."""

    uss: int
    processes: int


def _uss_of(proc: ProcessLike) -> int | None:
    try:
        return int(proc.memory_full_info().uss)
    except _UNMEASURABLE:
        return None


def uss(pid: int, *, factory: ProcessFactory = psutil.Process) -> int | None:
    """USS of one process in bytes, ``None`` if it cannot be measured."""
    try:
        proc = factory(pid)
    except _UNMEASURABLE:
        return None
    return _uss_of(proc)


def tree_uss(pid: int, *,
             factory: ProcessFactory = psutil.Process) -> TreeMemory | None:
    """Sum of USS over ``pid`` and all its descendants.

    ``None`` when not even ``pid`` itself can be measured; a descendant that
    vanished meanwhile is simply left out.
    """
    try:
        root = factory(pid)
    except _UNMEASURABLE:
        return None
    own = _uss_of(root)
    if own is None:
        return None
    try:
        children = list(root.children(recursive=True))
    except _UNMEASURABLE:
        children = []
    total, count = own, 1
    for child in children:
        figure = _uss_of(child)
        if figure is not None:
            total += figure
            count += 1
    return TreeMemory(uss=total, processes=count)
