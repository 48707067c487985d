"""[cni_health_server] (Kuryr's names) and [health]: probes and checks."""
from __future__ import annotations

from oslo_config import cfg

SERVER_GROUP = "cni_health_server"
HEALTH_GROUP = "health"

SERVER_OPTS: list[cfg.Opt] = [
    cfg.HostAddressOpt("host", default="127.0.0.1",
                       help="Address the probe endpoints listen on. The "
                            "DaemonSet runs with hostNetwork and points its "
                            "probes at 127.0.0.1."),
    cfg.PortOpt("port", default=8090,
                help="Port of /startup, /ready, /alive, /status, /metrics."),
    cfg.IntOpt("max_memory_usage", default=-1, min=-1, mutable=True,
               help="Daemon memory limit in MiB (cgroup usage, else the sum "
                    "of USS over the process tree); above it /alive fails. "
                    "-1 disables the check."),
    cfg.StrOpt("cg_path", default="",
               help="cgroup directory whose usage is the daemon's memory. "
                    "Empty: the master's own cgroup from /proc/self/cgroup "
                    "(v2 memory.current, v1 memory.memsw.usage_in_bytes or "
                    "memory.usage_in_bytes)."),
    cfg.IntOpt("max_connections", default=256, min=8, max=16384,
               help="Most client connections the probe listener keeps open; "
                    "at the limit the oldest idle or slow one is closed to "
                    "make room, so a probe always gets in."),
    cfg.IntOpt("threads", default=4, min=1, max=64,
               help="Threads answering probe requests, whatever the number "
                    "of connections."),
    cfg.FloatOpt("header_timeout", default=2.0, min=0.1, max=60.0,
                 help="Seconds a client has to send its request line and "
                      "headers, counted from the connection's start (not "
                      "reset by each byte received)."),
    cfg.FloatOpt("idle_timeout", default=5.0, min=0.1, max=600.0,
                 help="Seconds an idle keep-alive connection is kept open."),
]

HEALTH_OPTS: list[cfg.Opt] = [
    cfg.FloatOpt("check_interval", default=1.0, min=0.05, max=60.0,
                 mutable=True,
                 help="Seconds between runs of the health checks."),
    cfg.FloatOpt("checker_deadline", default=10.0, min=0.2, mutable=True,
                 help="A check snapshot older than this fails liveness "
                      "(the checker itself is stuck)."),
    cfg.FloatOpt("check_timeout", default=5.0, min=0.1, max=120.0,
                 mutable=True,
                 help="Seconds a check that does I/O may take before it "
                      "is reported failing (\"<check>: no answer within "
                      "N s\"), unless it has a bound of its own: ovsdb "
                      "takes [binding] ovsdb_timeout, k8s-api [kubernetes] "
                      "api_check_timeout, keystone and neutron "
                      "[controller] openstack_timeout. Each such check "
                      "runs on a thread of its own, never in the loop that "
                      "beats the HealthManager's heartbeat, and is not "
                      "started again while a run is still going, so a hung "
                      "dependency makes the daemon not ready, naming it, "
                      "never stale."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(SERVER_OPTS, group=SERVER_GROUP)
    conf.register_opts(HEALTH_OPTS, group=HEALTH_GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    return [(SERVER_GROUP, SERVER_OPTS), (HEALTH_GROUP, HEALTH_OPTS)]


def validate(conf: cfg.ConfigOpts) -> None:
    """The checker must get a chance to run before it is declared stale."""
    interval = conf.health.check_interval
    deadline = conf.health.checker_deadline
    if deadline <= interval:
        raise ValueError(f"[health] checker_deadline ({deadline:g}s) must be "
                         f"longer than check_interval ({interval:g}s)")
