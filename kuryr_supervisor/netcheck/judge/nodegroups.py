"""The security groups that let the nodes' ports and the pods talk, and
nothing wider.

The pods' ports name no security group: they have the project's
``default`` group, which admits ingress from its own members only, so
the kubelet's probes, sent from the node's port (:mod:`.nodeports`),
would be dropped. The controller keeps a group of its own for the nodes'
ports, named after the cluster (``<cluster tag>:nodes``, so it is known
as the cluster's by its name even when its tag call was lost) and tagged
with the cluster tag, and two rules, every protocol, IPv4:

* in the pods' group (``default``): ingress from the nodes' group (the
  kubelet's HTTP, TCP and gRPC probes; nothing from anyone else);
* in the nodes' group: ingress from the pods' group (a pod reaches its
  node's port); its egress is Neutron's default for a new group (all).
  Where the network_policy handler runs, it adds its own rule here, as in
  ``default``: ingress from the pods a NetworkPolicy selects (they left
  ``default``), which nothing here removes.

:meth:`NodeGroups.ensure` is one pass, made before the node ports are
made: the oldest group of that name is kept (another, tagged as ours,
left by a handover mid-create, is deleted; one Neutron still holds in use
is left for the next pass), made if there is none, tagged if its tag is
missing, and each rule made if it is missing (a rule Neutron says exists
is fine): a restart writes nothing. :meth:`NodeGroups.release` deletes
the group (Neutron deletes the rules that name it) once the node ports
are gone.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack.secgroups import SecurityGroup

LOG = logging.getLogger(__name__)

#: The pods' group: the project's default (the pods' ports name none).
PODS_GROUP = "default"
DESCRIPTION = ("kuryr-supervisor: the nodes' ports into the pod network "
               "(the kubelet's probes); admitted by the pods' group")


def group_name(tag: str) -> str:
    """The nodes' group's name for the cluster of ``tag``."""
    return f"{tag}:nodes"


class NodeGroups:
    """See the module; ``beat`` is the handler's heartbeat."""

    def __init__(self, cloud: osa.OpenStack, *,
                 beat: Callable[[], None] = lambda: None) -> None:
        self.cloud, self._beat = cloud, beat
        #: What the last pass found: the nodes' group, the pods' group.
        self.nodes_group = ""
        self.pods_group = ""
        self.writes = 0

    def ensure(self, project: str, tag: str) -> list[str]:
        """One pass (see the module); the node ports' groups."""
        group = self._group(project, tag)
        pods = self.cloud.security_groups(name=PODS_GROUP,
                                          project_id=project)
        if not pods:
            raise osa.OpenStackUnavailable(
                f"project {project} has no {PODS_GROUP} security group yet")
        self.pods_group = pods[0].id
        self._rule(self.pods_group, group.id, "the pods' group admits the "
                                              "nodes' ports")
        self._rule(group.id, self.pods_group, "the nodes' group admits the "
                                              "pods")
        self.nodes_group = group.id
        return [group.id]

    def _group(self, project: str, tag: str) -> SecurityGroup:
        name = group_name(tag)
        found = self.cloud.security_groups(name=name, project_id=project)
        self._beat()
        if not found:
            made = self.cloud.create_security_group(
                name=name, project_id=project, description=DESCRIPTION)
            self.writes += 1
            LOG.info("made the nodes' security group %s (%s)", made.id, name)
            found = [made]
        group, *others = found
        if tag not in group.tags:
            self.cloud.set_security_group_tags(
                group.id, sorted({*group.tags, tag}))
            self.writes += 1
        for other in others:
            if tag not in other.tags:
                continue            # not proven ours: left alone
            try:
                if self.cloud.delete_security_group(other.id):
                    LOG.info("deleted a duplicate of the nodes' security "
                             "group: %s", other.id)
                    self.writes += 1
            except osa.OpenStackRefused as exc:
                LOG.debug("duplicate group %s kept for now: %s", other.id,
                          exc)
        return group

    def _rule(self, group: str, remote: str, what: str) -> None:
        if self.cloud.admit_group(group, remote):
            self.writes += 1
            LOG.info("made a security group rule: %s", what)
        self._beat()

    def release(self, project: str, tag: str) -> int:
        """Every nodes' group of the cluster deleted (tagged as ours);
        how many."""
        deleted = 0
        for group in self.cloud.security_groups(name=group_name(tag),
                                                project_id=project):
            if tag in group.tags and \
                    self.cloud.delete_security_group(group.id):
                deleted += 1
        return deleted
