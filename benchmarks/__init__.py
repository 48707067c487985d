"""Benchmarks of kuryr-supervisor: ``python3 -m benchmarks`` (``tox -e bench``).

Not part of the test run: they need root, real network namespaces and a
quiet-ish machine, and they print figures rather than assert them. One
module per benchmark (``cni_latency``, ``burst``, ``probes``, ``recovery``,
``memory``, ``startup``), each exposing ``run(ctx) -> Outcome``; the shared
machinery is in ``harness``, ``plugins``, ``context`` and ``stats``; the
runner is ``run``.
"""
