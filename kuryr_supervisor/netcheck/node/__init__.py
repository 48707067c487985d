"""The node's side of network health: what the CNI role's HealthManager
does for its node's network, beside its loop.

- :mod:`.dataplane`: the STATUS answer and the record's report, read off
  the data-plane checks by name;
- :mod:`.netwatch`: the STATUS flags and the threads beside the loop;
- :mod:`.netrecord`: the node's NodeNetwork record, written on change and
  on a slow heartbeat; released on uninstall;
- :mod:`.recordfollow`: the node's own record, followed with a watch;
- :mod:`.clusterview`: what the judge last said of this node, and whether
  it still stands;
- :mod:`.statushold`: which failing checks STATUS spares, and why;
- :mod:`.verdict`: the ``network-verdict`` check, the judge's verdict on
  this node;
- :mod:`.canary`: the node's canary, its plug and its prober.

Above :mod:`kuryr_supervisor.health` (its checks, monitor and loops) and
below the HealthManager worker that starts it; it never imports the
controller nor the judge.
"""
