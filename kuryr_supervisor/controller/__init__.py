"""The controller role (``--role controller``): Kuryr's controller half.

``handlers`` is the plugin contract: what a handler is, what a handler
process hands it, and how handlers are found (entry points). The rest is
five sub-packages, each importing only those below it (checked by the
import-layer contracts in ``.importlinter``):

- :mod:`.ports`: the built-in ``neutron_port`` handler (a Neutron port per
  pod, announced in the pod's PodPort);
- :mod:`.services`: beside it, the ``services`` handler (Services as
  Octavia load balancers);
- :mod:`.pools`: ports made ahead per node and handed to pods at once
  (``[vif_pool]``);
- :mod:`.leadership`: the Lease-based leader election and the announcement
  of the creates a leader has at Neutron;
- :mod:`.openstack`: the OpenStack adapter, the only importer of
  keystoneauth1 (Keystone tokens, Neutron ports, subnets and quotas).

The network judge and the canaries (``network_health``,
``network_canary``) are handlers built on the same runtime too, rooms of
the controller under the same contracts, but live with the rest of
network health in :mod:`kuryr_supervisor.netcheck.judge`.

Above ``kubernetes`` (whose adapter it uses), below ``health`` (whose
Keystone and Neutron checks use :mod:`.openstack`).
"""
