"""The Watcher worker (placeholder shell: heartbeats until its issue fills it)."""
from __future__ import annotations

from kuryr_supervisor.state import Component
from kuryr_supervisor.workers.base import Worker


class WatcherWorker(Worker):
    name = "Watcher"
    component = Component.WATCHER

    def serve(self) -> None:
        self.state.set_ready(self.component, True)
        super().serve()
