"""The CNI data path inside the daemon.

``protocol`` (parse, validate, per-version results) -> ``service`` (ADD, DEL,
CHECK, STATUS, GC over ``ipam/`` and ``binding``, under ``locks``) -> ``api``
(the WSGI app) -> ``serving`` (the bounded HTTP server on a Unix socket or
TCP). ``netlink/`` is the only importer of pyroute2. The ``kuryr-cni`` shim
that calls the daemon lives in :mod:`kuryr_supervisor.cni.shim` and imports
nothing of the package: it must run with the standard library alone.
``install`` puts the shim and the conflist on the host once the daemon is
ready.
"""
