"""Kubernetes: everything the daemon does with the API and on its behalf.

``config`` (mode, node name, and the ``endpoint`` to authenticate to,
from Kuryr's options, a ``kubeconfig`` or the service account) and the
client: ``transport`` (the connection pool, deadlines, errors and the
write fence), ``resource`` (a ``Resource`` reference and the one generic
``ResourceClient``: get, create, replace, replace_status, patch, delete,
page, watch, for every resource), ``client`` (``K8sClient``, the
per-process façade: the transport, this node's name, one resource client
per resource used, the health probes); ``wire`` is the error taxonomy
and the decoding of pods and watch events. ``informer`` is the generic
list+watch loop (``Informer[T]`` over a ``Source[T]`` into a
``Sink[T]``) and ``listing`` its source over one resource. Each
resource's module keeps only its schema and codec: ``podport`` (the
PodPort resource: the pod's Neutron port, written by the controller
alone, read by the CNI role), ``nodenetwork`` (the NodeNetwork
resource's name only: what a record says is network health's,
:mod:`kuryr_supervisor.netcheck.codecs`), ``nodes`` (a Node's pod CIDR and
conditions, a namespace's UID), ``leases`` (the Lease) and ``events``
(Events on this Node).
The CNI role's: ``registry`` the on-disk pod registry, ``reclaim``
releases what deleted pods left, ``nodecondition`` publishes the Node
condition, ``podportfollow`` follows this node's PodPorts and
``lostpods`` books the pods whose port is lost. The controller role's:
``clusterpods`` (every pod of the cluster, for the informer),
``portdata`` (the port data a PodPort carries and its checks; the legacy
annotation, never trusted) and ``lease`` (leader election).
"""
