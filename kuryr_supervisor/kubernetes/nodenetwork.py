"""The NodeNetwork custom resource as the API serves it: its name, for the
client's façade (:attr:`K8sClient.nodenetworks
<.client.K8sClient.nodenetworks>`) and the write fence
(:func:`.transport.fenced`).

``nodenetworks.kuryr-supervisor.openstack.org/v1``, kind ``NodeNetwork``,
cluster-scoped, one per node, named after it and owned by its Node. What
a record says (the status the node writes, the parts of the spec the
controller writes) is network health's, read and written by both its
sides: :mod:`kuryr_supervisor.netcheck.codecs`. Only the name is here,
below the client that serves the resource.
"""
from __future__ import annotations

from kuryr_supervisor.kubernetes.resource import Resource

GROUP = "kuryr-supervisor.openstack.org"
VERSION = "v1"
PLURAL = "nodenetworks"
KIND = "NodeNetwork"
API_VERSION = f"{GROUP}/{VERSION}"
#: The resource, for the generic client (:mod:`.resource`).
RESOURCE = Resource(GROUP, VERSION, PLURAL, KIND, namespaced=False)
