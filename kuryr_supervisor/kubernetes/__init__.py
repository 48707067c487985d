"""Kubernetes: everything the daemon does with the API and on its behalf.

``client`` is the only importer of the ``kubernetes`` library; ``wire`` is the
error taxonomy and the decoding of pods and watch events; ``podwatch`` is the
list+watch loop, ``registry`` the on-disk pod registry, ``reclaim`` releases
what deleted pods left and ``nodecondition`` publishes the Node condition.
"""
