"""[supervisor]: how the master governs its workers."""
from __future__ import annotations

from oslo_config import cfg

GROUP = "supervisor"

OPTS = [
    cfg.StrOpt("worker_death_policy", default="restart", choices=[
        ("restart", "restart a dead or stale worker (with backoff); past the "
                    "restart budget liveness fails and restarts go on"),
        ("exit", "restart within the budget; past it, or when liveness fails "
                 "for a cause restarting cannot fix, the master exits with "
                 "that cause's non-zero status. max_restarts = 0 exits on "
                 "the first worker death, as Kuryr did (but never with 0)"),
    ], mutable=True, help="What the master does when a worker dies or hangs."),
    cfg.IntOpt("max_restarts", default=5, min=0, mutable=True,
               help="Worker restarts allowed within restart_window before "
                    "the restart budget is exhausted."),
    cfg.FloatOpt("restart_window", default=300.0, min=1.0, mutable=True,
                 help="Seconds over which worker restarts are counted."),
    cfg.FloatOpt("restart_backoff_max", default=5.0, min=0.0, mutable=True,
                 help="Upper bound in seconds of the delay before restarting "
                      "a worker that keeps dying. The first restart in a "
                      "window is immediate; each further one doubles the "
                      "delay from 0.25 s."),
    cfg.FloatOpt("heartbeat_interval", default=0.5, min=0.05, max=60.0,
                 mutable=True, help="Seconds between worker heartbeats."),
    cfg.FloatOpt("watcher_deadline", default=10.0, min=0.2, mutable=True,
                 help="Seconds without a heartbeat after which the Watcher "
                      "is stale: named in /alive, stacks dumped, restarted."),
    cfg.FloatOpt("server_deadline", default=10.0, min=0.2, mutable=True,
                 help="Seconds without a heartbeat after which the Server "
                      "is stale."),
    cfg.FloatOpt("health_deadline", default=10.0, min=0.2, mutable=True,
                 help="Seconds without a heartbeat after which the "
                      "HealthManager is stale."),
    cfg.FloatOpt("handler_deadline", default=10.0, min=0.2, mutable=True,
                 help="Seconds without a heartbeat after which the "
                      "controller role's handler process is stale (each "
                      "handler's own)."),
    cfg.IntOpt("max_worker_memory", default=-1, min=-1, mutable=True,
               help="Per-worker memory limit (USS) in MiB; a worker above it "
                    "is restarted gracefully. The HealthManager is exempt (it "
                    "must stay up to explain failures; max_memory_usage "
                    "still counts it). -1 disables the check."),
    cfg.IntOpt("health_nice", default=-5, min=-20, max=19,
               help="Nice value of the HealthManager process. Below the "
                    "other workers' so that a probe is answered at once "
                    "even while a burst of CNI requests (and their shim "
                    "processes) keeps every core busy. Lowering a nice "
                    "value needs CAP_SYS_NICE; without it the HealthManager "
                    "keeps the master's and says so once in the log: raise "
                    "work_nice instead (documentation: Operate, CPU priority and memory)."),
    cfg.IntOpt("work_nice", default=0, min=-20, max=19,
               help="Nice value of the workers that do the node's work "
                    "(Server, Watcher, the controller's handlers). Raising "
                    "it above health_nice needs no privilege and keeps the "
                    "HealthManager ahead of them inside the daemon's own "
                    "cgroup."),
    cfg.IntOpt("graceful_shutdown_timeout", default=25, min=1, max=3600,
               help="Seconds SIGTERM waits for in-flight work before the "
                    "daemon exits anyway; keep it below the pod's "
                    "terminationGracePeriodSeconds (Kubernetes default 30)."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]
