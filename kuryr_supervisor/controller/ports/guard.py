"""NetworkPolicy from a pod's first packet: its port made (or a pool port
claimed) in its policies' security groups, and its address in the peer
address groups it belongs in, before its PodPort is written, so the CNI
ADD never returns a pod that admits more than its policies allow.

Only where ``network_policy`` is among ``[controller] handlers``
(:func:`wanted`); elsewhere the port handler has no guard and makes no
read or call more than before.

What the port handler knows, in its own process (the policy handler's
book is another process's): the NetworkPolicies and Namespaces, from
informers of its own (:meth:`PolicyGuard.run`, a thread each, into a
:class:`~kuryr_supervisor.controller.policy.book.PolicyBook` that holds
no pods); each pod's labels and named ports, decoded from the handler's
own pod watch (:meth:`PolicyGuard.decode`), kept while the pod needs a
port; the groups' ids, from Neutron listed by the policy handler's tags
(security groups) and description (address groups), cached, listed
again when a name is missing from the cache or a create names a group
that is gone. A pod's groups are the model's
(:func:`~kuryr_supervisor.controller.policy.desired.port_groups`, the
policy handler's own function): the two handlers cannot disagree.

A group not made yet (the policy handler has not passed since its
policy came): the port is made in the groups of the pod's that exist,
possibly none, never in the default groups. A port's groups only add
what it admits, so a part of them admits no more than all of them; a
port with no group, port security on, admits nothing (ML2/OVN puts every
such port in its drop port group; the OVS firewall likewise). The policy
handler's next pass gives it its groups (its PUT of a port that differs;
a pod no policy selects any more goes back to the default groups, a port
in no group counted as one of its own). Waiting instead would hold the
ADD for as long as the policy handler is late (down, failing over,
refused by Neutron): unbounded; the port in a part of its groups keeps
the ADD as short as today's, the pod cut off from what its missing
groups allow until the next pass (the policy handler's p99 ≤ 2 s).
Chosen over a deny-all group of the port handler's own: the same packets,
with no group to make, name, sweep or count in the quota.

Address groups (:meth:`PolicyGuard.join`): once the ports of a request
are made (their addresses known) and before their PodPorts, one
``add_addresses`` per address group for all the request's pods that
belong in it (an address already in is no error,
:mod:`~kuryr_supervisor.controller.openstack.addrgroups`); a group not
made yet is left to the policy handler, which makes it with its members.
The policy handler counts a pod whose status has no address yet by its
port's (read at each full look), so its restart finds the membership
already right and writes nothing.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kuryr_supervisor.controller.openstack import adapter as osa
from kuryr_supervisor.controller.openstack import sgwire
from kuryr_supervisor.controller.policy import desired as model
from kuryr_supervisor.controller.policy import spec
from kuryr_supervisor.controller.policy.book import (
    DECODERS,
    PolicyBook,
    Sink,
)
from kuryr_supervisor.controller.policy.naming import POLICY_TAG, Naming
from kuryr_supervisor.controller.policy.peers import members
from kuryr_supervisor.controller.policy.reconcile import FAMILIES
from kuryr_supervisor.controller.runtime import Runtime
from kuryr_supervisor.kubernetes import client as k8s
from kuryr_supervisor.kubernetes.clusterpods import ClusterPod, cluster_pod
from kuryr_supervisor.kubernetes.listing import Listing

LOG = logging.getLogger(__name__)
#: The handler whose groups the guard puts ports in.
HANDLER = "network_policy"
#: The kinds the guard watches (pods come from the port handler's watch).
KINDS = ("NetworkPolicy", "Namespace")
PAGE_SIZE = 500


def wanted(handlers: Iterable[str]) -> bool:
    """A guard is built where the policy handler runs."""
    return HANDLER in handlers


def _idle() -> None:
    """The guard's watch threads do not beat: the handler's loop does."""


class PolicyGuard:
    """See the module; ``cloud`` the handler's adapter, ``client`` its
    Kubernetes client, ``tag()`` the cluster's tag (the ports')."""

    def __init__(self, cloud: osa.OpenStack, client: k8s.K8sClient, *,
                 tag: Callable[[], str]) -> None:
        self.cloud, self.client, self.tag = cloud, client, tag
        self.book = PolicyBook()
        self.book.replace("Pod", [])        # the handler's watch has them
        self.book.replace("Node", [])       # the model's port groups need
        #                                     a pod's node's name only
        #: pod UID -> its model (labels, named ports, node)
        self.models: dict[str, spec.Pod] = {}
        self._lock = threading.Lock()
        self._groups: dict[str, str] = {}   # security group name -> id
        self._ags: dict[str, str] = {}      # address group name -> id

    # -- what it knows ---------------------------------------------------------
    def sources(self) -> list[tuple[str, Listing[Any]]]:
        """The NetworkPolicies' and Namespaces' listings."""
        resources = {"NetworkPolicy": self.client.networkpolicies,
                     "Namespace": self.client.namespaces}
        return [(kind, Listing(resources[kind], DECODERS[kind],
                               page_size=PAGE_SIZE)) for kind in KINDS]

    def run(self, rt: Runtime, stopping: threading.Event) -> None:
        """The watches, a thread each, until ``stopping``."""
        for kind, source in self.sources():
            threading.Thread(
                target=rt.informer(source, Sink(self.book, kind),
                                   heartbeat=_idle, what=kind,
                                   on_synced=_idle).run,
                args=(stopping,), name=f"ports-{kind.lower()}s",
                daemon=True).start()

    def decode(self, obj: Mapping[str, Any]) -> ClusterPod:
        """The port handler's pod, with what its policies select on."""
        pod = cluster_pod(obj)
        return dataclasses.replace(pod, model=spec.pod(obj)) \
            if pod.needs_port else pod

    def seen(self, pod: ClusterPod) -> None:
        with self._lock:
            if pod.needs_port and isinstance(pod.model, spec.Pod):
                self.models[pod.uid] = pod.model
            else:
                self.models.pop(pod.uid, None)

    def forget(self, uid: str) -> None:
        with self._lock:
            self.models.pop(uid, None)

    # -- the security groups ---------------------------------------------------
    def groups(self, uids: Sequence[str]
               ) -> tuple[dict[str, tuple[str, ...] | None], list[str]]:
        """Each pod's groups (None: the default groups: no policy selects
        it), and the pods not known enough yet to say (the watches not
        listed yet, a pod without its model): those wait."""
        if not uids:
            return {}, []
        if not self.book.synced:
            return {}, list(uids)
        snap, naming = self.book.snapshot(), Naming(self.tag())
        out: dict[str, tuple[str, ...] | None] = {}
        waiting: list[str] = []
        names: dict[str, tuple[str, ...]] = {}
        for uid in uids:
            with self._lock:
                pod = self.models.get(uid)
            if pod is None:
                waiting.append(uid)
                continue
            found = model.port_groups(pod, snap.policies, naming)
            out[uid] = None
            if found is not None:
                names[uid] = found
        if not names:
            return out, waiting
        wanted_names = {n for found in names.values() for n in found}
        if not wanted_names <= set(self._groups):
            self._groups = {g.name: g.id for g in self.cloud.policy_groups(
                naming.cluster_tag, POLICY_TAG)}
        for uid, found in names.items():
            made = tuple(self._groups[n] for n in found if n in self._groups)
            if len(made) < len(found):
                LOG.info("pod %s: %d of its %d security groups are not made "
                         "yet: its port is made in the others only (the "
                         "network_policy handler adds them)", uid,
                         len(found) - len(made), len(found))
            out[uid] = made
        return out, waiting

    def of(self, uid: str) -> tuple[str, ...] | None:
        """Pod ``uid``'s groups, for its port made again (a port that
        vanished, :mod:`.verify`): as :meth:`groups` says (None: the
        default groups); a pod not known enough yet gets none (its port
        admits nothing until the policy handler's next pass), never the
        defaults."""
        found, waiting = self.groups([uid])
        return () if uid in waiting else found.get(uid)

    def selected(self, uids: Iterable[str]) -> set[str]:
        """The pods of ``uids`` a NetworkPolicy selects, as far as the
        guard knows (none before its watches listed): their nodes keep a
        closed pool (:mod:`~kuryr_supervisor.controller.pools.portpools`).
        No call."""
        if not self.book.synced:
            return set()
        snap = self.book.snapshot()
        if not snap.policies:
            return set()
        try:
            naming = Naming(self.tag())
        except k8s.K8sError:
            return set()            # the cluster's tag not read yet
        with self._lock:
            models = {u: m for u in uids if (m := self.models.get(u))}
        return {u for u, pod in models.items() if model.port_groups(
            pod, snap.policies, naming) is not None}

    def stale(self) -> None:
        """A group named was refused (gone): the ids are listed again."""
        self._groups = {}
        self._ags = {}

    # -- the address groups ----------------------------------------------------
    def join(self, ports: Sequence[tuple[str, osa.Port]]
             ) -> dict[str, Exception]:
        """The addresses of ``ports`` ((pod UID, its port)) into the
        address groups their pods belong in: one call per group; the pods
        whose address could not be added (their PodPorts wait)."""
        snap = self.book.snapshot()
        if not snap.policies or not ports:
            return {}
        naming = Naming(self.tag())
        by_name = {ns.name: ns for ns in snap.namespaces}
        sets = [(ag.name, ag.peers) for ag in model.desired(
            snap.policies, (), snap.namespaces, naming
        ).address_groups.values() if ag.peers is not None]
        joins: dict[str, dict[str, str]] = {}     # group -> address -> uid
        for uid, port in ports:
            with self._lock:
                pod = self.models.get(uid)
            if pod is None or port.ip is None:
                continue
            pod = dataclasses.replace(pod, ips=(str(port.ip),))
            for name, peers in sets:
                for address in members(peers, (pod,), by_name, FAMILIES):
                    joins.setdefault(name, {})[address] = uid
        if not joins:
            return {}
        if not set(joins) <= set(self._ags):
            self._ags = {ag.name: ag.id for ag in
                         self.cloud.address_groups(naming.cluster_tag)}
        failed: dict[str, Exception] = {}
        for name, addresses in sorted(joins.items()):
            group_id = self._ags.get(name)
            if group_id is None:
                continue        # made by the policy handler, with them
            try:
                self.cloud.add_addresses(group_id, sorted(addresses))
            except sgwire.Missing:
                self._ags.pop(name, None)   # deleted: no peer set any more
            except osa.OpenStackError as exc:
                failed.update((uid, exc) for uid in addresses.values())
        return failed
