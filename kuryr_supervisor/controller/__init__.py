"""The controller role (``--role controller``): Kuryr's controller half.

``handlers`` is what a handler is and how handlers are found (entry points);
``neutronport`` the built-in handler (a Neutron port per pod, announced in
the pod's PodPort), with ``ownedports`` (which ports are the controller's,
what their PodPorts say, a gone pod's release), ``portresync`` (what one
port list says to do), ``portbatch`` (pods batched into Neutron bulk
creates), ``podportwriter`` (PodPorts written a few at a time),
``portretry`` (what a failed step costs: a retry, a count, or nothing) and
``heap`` (freed heap handed back after a relist); ``leader`` the
Lease-based leader election of the
handler processes; ``openstack`` the only importer of keystoneauth1 (Keystone
tokens, Neutron ports, subnets and quotas), with ``neutronwire`` its errors,
records and decoding. Above ``kubernetes`` (whose
adapter it uses), below ``health`` (whose Keystone and Neutron checks use
``openstack``).
"""
