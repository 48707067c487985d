"""The node's pods as last seen by the Watcher, kept on disk for the Server.

Role: the Watcher writes (upsert, delete, replace_all after every complete
list); the Server reads it on CNI ADD through :class:`PodChecker`. The two
are different processes, so the registry is an SQLite file in the state
directory (WAL: the reader never blocks the writer) and every process opens
its own connection (never one inherited across ``fork``).

Invariants: ``replace_all`` swaps the whole content in one transaction and
marks the registry *synced*; a reader sees either the old or the new list,
never a mix. A registry that never completed a list is not synced and no
pod is ever judged gone from it.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable
from typing import Protocol

from kuryr_supervisor import errors

LOG = logging.getLogger(__name__)

DEFAULT_STATE_DIR = "/var/lib/kuryr-supervisor"
FILE_NAME = "pods.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS pods (
    namespace TEXT NOT NULL, name TEXT NOT NULL, uid TEXT NOT NULL,
    deletion_timestamp TEXT, PRIMARY KEY (namespace, name));
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclasses.dataclass(frozen=True)
class Pod:
    """What the daemon needs to know of a pod (not the whole object)."""

    namespace: str
    name: str
    uid: str
    deletion_timestamp: str | None = None


class PodRefLike(Protocol):
    """A pod named by a CNI request (``ipam.PodRef`` fits)."""

    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...


def registry_path(state_dir: str) -> str:
    return os.path.join(state_dir or DEFAULT_STATE_DIR, FILE_NAME)


class PodRegistry:
    """The pods on this node, in an SQLite file shared between processes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.local()

    def _db(self) -> sqlite3.Connection:
        """One connection per thread and process: sqlite3 connections must
        not cross ``fork`` and are not shared between threads here."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None or getattr(self._local, "pid", None) != os.getpid():
            os.makedirs(os.path.dirname(self.path) or ".", mode=0o700,
                        exist_ok=True)
            db = sqlite3.connect(self.path, timeout=5.0,
                                 isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            self._local.db, self._local.pid = db, os.getpid()
        return db

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None and self._local.pid == os.getpid():
            db.close()
        self._local.db = None

    # -- writes (Watcher) ----------------------------------------------------
    def upsert(self, pod: Pod) -> None:
        self._db().execute(
            "INSERT OR REPLACE INTO pods VALUES (?, ?, ?, ?)",
            (pod.namespace, pod.name, pod.uid, pod.deletion_timestamp))

    def delete(self, namespace: str, name: str) -> None:
        self._db().execute("DELETE FROM pods WHERE namespace=? AND name=?",
                           (namespace, name))

    def replace_all(self, pods: Iterable[Pod],
                    resource_version: str = "") -> None:
        """Swap in a complete list atomically and mark the registry synced."""
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("DELETE FROM pods")
            db.executemany("INSERT OR REPLACE INTO pods VALUES (?, ?, ?, ?)",
                           [(p.namespace, p.name, p.uid, p.deletion_timestamp)
                            for p in pods])
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                           [("synced", "1"),
                            ("resource_version", resource_version)])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    # -- reads (Server, Watcher) ---------------------------------------------
    def get(self, namespace: str, name: str) -> Pod | None:
        row = self._db().execute(
            "SELECT namespace, name, uid, deletion_timestamp FROM pods "
            "WHERE namespace=? AND name=?", (namespace, name)).fetchone()
        return Pod(*row) if row else None

    def all(self) -> list[Pod]:
        rows = self._db().execute(
            "SELECT namespace, name, uid, deletion_timestamp FROM pods "
            "ORDER BY namespace, name").fetchall()
        return [Pod(*row) for row in rows]

    def synced(self) -> bool:
        row = self._db().execute(
            "SELECT value FROM meta WHERE key='synced'").fetchone()
        return bool(row and row[0] == "1")


GetPod = Callable[[str, str], "Pod | None"]


class PodChecker:
    """The Server's guard on CNI ADD: refuse to plumb a pod that is gone.

    The registry answers the common case without I/O. A miss (or another
    UID) may only mean the watch lags behind the kubelet, so it is
    confirmed with the API (``get_pod``) before the ADD is refused; if the
    API cannot be asked, the ADD goes ahead: the check must never turn an
    API outage into failed pod starts.
    """

    def __init__(self, registry: PodRegistry | None,
                 get_pod: GetPod | None = None) -> None:
        self._registry = registry
        self._get_pod = get_pod

    def check_pod(self, ref: PodRefLike) -> None:
        """Raise :class:`errors.PodGone` if ``ref`` names a pod that is gone."""
        if self._registry is None or not ref.name:
            return          # standalone, or not a Kubernetes pod
        try:
            if not self._registry.synced():
                return
            known = self._registry.get(ref.namespace, ref.name)
        except sqlite3.Error:
            LOG.warning("pod registry unreadable, not checking %s/%s",
                        ref.namespace, ref.name, exc_info=True)
            return
        if known is not None and (not ref.uid or known.uid == ref.uid):
            return
        if self._get_pod is not None:
            try:
                known = self._get_pod(ref.namespace, ref.name)
            except Exception:  # noqa: BLE001 - adapter errors: do not block
                LOG.debug("cannot confirm pod %s/%s with the API",
                          ref.namespace, ref.name, exc_info=True)
                return
        if known is None:
            raise errors.PodGone(f"pod {ref.namespace}/{ref.name} is gone")
        if ref.uid and known.uid != ref.uid:
            raise errors.PodGone(
                f"pod {ref.namespace}/{ref.name} has UID {known.uid}, "
                f"not {ref.uid}")
