"""The master process: it forks the workers and governs them.

``manager`` (the cotyledon ServiceManager and its governor thread) acts on the
pure decisions of ``supervisor`` (restart, backoff, budgets, exit causes),
tells systemd through ``sdnotify`` and logs transitions through ``reporting``.
Nothing below the master imports it.
"""
