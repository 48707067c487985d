"""Health: what the HealthManager worker knows and answers.

``checks/`` (each check with injected inputs) -> ``monitor`` (the snapshot and
the aggregation into live/ready) -> ``probes`` (the werkzeug probe app) and
``metrics`` (Prometheus). ``processes`` measures the daemon's process tree.
Health observes the services below it (netlink, Kubernetes) and shared state;
it never imports a worker or the master. What the HealthManager does for
its node's network (STATUS flags, the NodeNetwork record, the canary) is
:mod:`kuryr_supervisor.netcheck.node`'s, above it.
"""
