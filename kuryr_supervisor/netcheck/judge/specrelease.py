"""Uninstalling: a controller handler's part of every NodeNetwork record's
spec taken out, the rest kept.

Two handlers write parts of each record's spec: ``network_canary`` the
node's canary and its share of the probing (:mod:`kuryr_supervisor.
netcheck.codecs.canaryspec`), ``network_health`` the cluster's verdict
(:mod:`kuryr_supervisor.netcheck.codecs.clusterspec`). Removing the controller
with ``[network_health] release_on_stop`` takes each part out, so no node
plugs a canary whose port is gone, nor spares its CNI STATUS on the word
of a judge that is gone.

:func:`release` lists every record (the watch has stopped by then) and
writes each that holds one of the keys without them, with its
resourceVersion as precondition; a record written meanwhile (409: its
node's heartbeat, the other handler's release) is listed and written
again, a few times at most.
"""
from __future__ import annotations

from collections.abc import Callable, Collection

from kuryr_supervisor.kubernetes.client import K8sClient
from kuryr_supervisor.kubernetes.wire import K8sPermanent
from kuryr_supervisor.netcheck.judge.records import RecordSource

#: Lists of every record at most.
ATTEMPTS = 3


def release(client: K8sClient, keys: Collection[str], *,
            beat: Callable[[], None] = lambda: None) -> tuple[int, bool]:
    """``keys`` taken out of every record's spec: (records written,
    whether none is left holding one). Raises the API's error (K8sError)
    when the records cannot be listed."""
    written = 0
    for _ in range(ATTEMPTS):
        items, _ = RecordSource(client, beat=beat).list()
        left = False
        for obj in items:
            spec = obj.get("spec") or {}
            name = str((obj.get("metadata") or {}).get("name") or "")
            if not name or not any(key in spec for key in keys):
                continue
            body = dict(obj)
            body["spec"] = {k: v for k, v in spec.items() if k not in keys}
            try:
                client.nodenetworks.replace(name, body)
            except K8sPermanent as exc:
                if exc.status == 409:
                    left = True
                elif exc.status != 404:
                    raise
                continue
            written += 1
            beat()
        if not left:
            return written, True
    return written, False
