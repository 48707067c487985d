"""The Server worker (placeholder shell: heartbeats until its issue fills it)."""
from __future__ import annotations

from kuryr_supervisor.state import Component
from kuryr_supervisor.workers.base import Worker


class ServerWorker(Worker):
    name = "Server"
    component = Component.SERVER

    def serve(self) -> None:
        self.state.set_ready(self.component, True)
        super().serve()
