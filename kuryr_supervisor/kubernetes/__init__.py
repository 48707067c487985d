"""Kubernetes: everything the daemon does with the API and on its behalf.

``config`` (mode, node name, and the ``endpoint`` to authenticate to,
from Kuryr's options, a ``kubeconfig`` or the service account) and the
client: ``client`` (``K8sClient``, the pod
calls and health probes) combines ``podportcalls``, ``leasecalls`` and
``nodecalls`` (Node, Events, namespaces) over ``transport`` (the
connection pool, deadlines and errors); ``wire`` is the
error taxonomy and the decoding of pods and watch events; ``podwatch`` is the
list+watch loop, ``registry`` the on-disk pod registry, ``reclaim`` releases
what deleted pods left and ``nodecondition`` publishes the Node condition.
For the controller role: ``clusterpods`` (every pod of the cluster, for the
same loop), ``podport`` (the PodPort resource: the pod's Neutron port,
written by the controller alone, read by the CNI role), ``portannotation``
(the port data's checks; the legacy annotation, never trusted) and
``lease`` (leader election). Network health: ``nodenetwork`` (the
NodeNetwork resource: what a node says of its data plane, written by that
node, read by the controller's judge, over ``nodenetworkcalls``), the
controller's parts of its spec (``canaryspec``: the node's canary and
probing; ``clusterspec``: the judge's cluster-wide verdict) and
``netconditions`` (the judge's Node conditions, and which are ours).
"""
