"""Network health: whether a pod plugged on a node now would reach the
network, judged on the node and from off it. One loop, in one home:

1. the node's side (:mod:`.node`, the CNI role's HealthManager) writes
   the node's NodeNetwork record: its data-plane checks, its canary's
   probes, its daemon's readiness;
2. the judge (:mod:`.judge`, the controller's ``network_health`` and
   ``network_canary`` handlers, on the leader) reads the records of the
   Nodes that exist, finds the symptoms and applies its rules: a local
   fault, a cluster-wide one, or none;
3. it publishes what it decided where the cluster looks (Node
   conditions, Events, figures) and writes into each record's spec what
   the node acts on: its canary's port and peers, the cluster-wide fault
   and the node's own verdict, renewed while they stand and lapsing when
   the judge is gone;
4. the node follows its own record (a watch): STATUS spares the checks
   a declared cluster-wide fault explains, and the ``network-verdict``
   check fails while the judge holds the node's own network broken.

The two sides meet only in the record, and share only its codecs
(:mod:`.codecs`: the record's status, the spec's parts, the judge's Node
conditions). The import contracts (``.importlinter``) keep it so: the
node's side sits above ``health`` (it is the HealthManager's) and below
``workers``; the judge is a room of the controller's beside the other
handlers', reaching the cluster and the cloud through the handler runtime,
the generic client and the OpenStack adapter only; neither side imports
the other, and the codecs import neither.

What stays elsewhere, and why:

* the data-plane checks (``ovsdb``, ``ovn-controller``, ``flows``,
  ``datapath``, ``bridge``: :mod:`kuryr_supervisor.health.checks`) are
  the daemon's readiness in every mode, standalone included, where no
  record or judge exists; network health reads their results by name
  (:mod:`.node.dataplane`);
* the shared-memory boards (:mod:`kuryr_supervisor.state`: what CNI
  STATUS answers, the lost ports, the judge's figures) are the
  foundation every process reads: the Server answers STATUS from one,
  the Watcher writes another, ``/metrics`` reads them all;
* the options (:mod:`kuryr_supervisor.conf.network_health`) are
  registered with the others at start-up, which the generated reference
  and sample read;
* the NodeNetwork resource's name (:mod:`kuryr_supervisor.kubernetes.
  nodenetwork`) is the Kubernetes client's: its façade serves the
  resource and its write fence covers it;
* the daemon's own Node condition and Events (:mod:`kuryr_supervisor.
  kubernetes.nodecondition`, :mod:`kuryr_supervisor.health.nodeevents`)
  say whether the daemon is healthy, not its network.
"""
