"""The CNI data path inside the daemon.

``protocol`` (parse, validate, per-version results) -> ``service`` (ADD, DEL,
CHECK, STATUS, GC over IPAM and binding, under ``locks``) -> ``api`` (the
WSGI app) -> ``serving`` (the bounded HTTP server on a Unix socket or TCP).
The ``kuryr-cni`` shim that calls it lives in :mod:`kuryr_supervisor.shim`,
apart, because it must run with the standard library alone.
"""
