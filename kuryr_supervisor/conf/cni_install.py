"""[cni_install]: installing the kuryr-cni shim and the conflist on the host."""
from __future__ import annotations

from oslo_config import cfg

GROUP = "cni_install"

OPTS: list[cfg.Opt] = [
    cfg.BoolOpt("enabled", default=False,
                help="Install the shim and the conflist once the daemon is "
                     "first ready. Off standalone (packages install them); "
                     "on in the DaemonSet's configuration."),
    cfg.StrOpt("bin_dir", default="/opt/cni/bin",
               help="Directory the runtime looks for CNI plugins in."),
    cfg.StrOpt("conf_dir", default="/etc/cni/net.d",
               help="Directory the runtime reads network configs from."),
    cfg.StrOpt("conflist_name", default="10-kuryr.conflist",
               help="File name of the network config list written to "
                    "conf_dir."),
    cfg.StrOpt("conflist_template", default="",
               help="Path of a conflist to install as is. Empty: a minimal "
                    "one with the kuryr-cni plugin."),
    cfg.StrOpt("shim_interpreter", default="/usr/bin/env python3",
               help="Interpreter line of the installed shim (after '#!'). "
                    "The default works on any host with python3 on PATH; "
                    "'/usr/bin/env -S python3 -I -S' (coreutils 8.30+, not "
                    "busybox) or '/usr/bin/python3 -IS' start it about 2 ms "
                    "faster per CNI call."),
    cfg.StrOpt("network_name", default="kuryr",
               help="Network name of the generated conflist."),
    cfg.BoolOpt("uninstall_on_stop", default=False,
                help="On a graceful stop (SIGTERM, exit 0), remove the "
                     "conflist and then the shim that this run installed "
                     "(nothing if it never became ready), and only while "
                     "they still carry the kuryr-supervisor marker. Off by "
                     "default so a rolling upgrade keeps the node's CNI; the "
                     "uninstall path turns it on before deleting the "
                     "DaemonSet (documentation: Operate, Uninstall)."),
    cfg.BoolOpt("force", default=False,
                help="Overwrite a shim or conflist at the install paths that "
                     "kuryr-supervisor did not write (no kuryr-supervisor "
                     "marker: e.g. upstream Kuryr's kuryr-cni). Off: such a "
                     "file is left alone and the daemon stays not ready "
                     "(check cni-install), naming it."),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]
