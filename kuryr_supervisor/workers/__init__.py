"""Worker processes run by the master; one module per role.

A worker is a thin shell: it builds its collaborators, blocks in ``run()``
calling :meth:`Worker.beat` from the loop that does its real work, and returns
quickly from ``terminate()``. The logic lives in plain objects elsewhere.
"""
