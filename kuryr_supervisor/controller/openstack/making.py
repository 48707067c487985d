"""Every port the controller makes or re-binds, through one path.

A pod's create (:mod:`~kuryr_supervisor.controller.ports.batch`), a pool's
fill (:mod:`~kuryr_supervisor.controller.pools.refill`), a pool port given
to a pod, its claim restarted after a crash included
(:mod:`~kuryr_supervisor.controller.pools.claims`), and a vanished port
made again (:mod:`~kuryr_supervisor.controller.ports.verify`) all go
through :class:`PortMaker`, which:

- binds each port to its node (``binding:host_id``) while Neutron's
  policy lets the controller's user (a 403 naming it: never again, said
  once; the port is then made unbound, never bound elsewhere), and
  checks the answer's binding where Neutron shows it;
- tags each port: the tags go in the create, and where Neutron drops them
  (ML2 without ``tag_ports_during_bulk_creation``, Neutron's and
  devstack's default) each port is tagged right after through the tags
  API (:mod:`.tagging`); a tag call that fails is tried again, and a port
  whose tag call was lost for good (a crash) is found again by what its
  create gave it (its name carries the cluster's tag, its owner is the
  controller's);
- asks for a pod's MAC address derived from its UID
  (:func:`derived_mac`: a locally administered unicast OUI and 24 bits
  of a hash), where Neutron lets the controller choose MACs (a member of
  the network's project, Neutron's default policy). Neutron refuses a
  second port with a MAC on the network (409 ``MacAddressInUse``), so a
  second create for a pod is refused whoever sends it, and the port the
  first made is looked up by its device and adopted: creates are
  idempotent, and no hold is needed after a lost answer or a handover. A
  MAC held by another pod's or a foreign port (a collision: 24 bits) is
  followed by the pod's next derivation, the same sequence for every
  sender. Where Neutron's policy refuses ``mac_address`` (403), MACs are
  Neutron's from then on (:class:`MacsRefused`, said once).

What Neutron allows is learned at start (:meth:`PortMaker.detect`: the
tags extension, the network's project) and confirmed by each answer; it
is in :attr:`PortMaker.modes` for readiness to say.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable, Sequence

from kuryr_supervisor.controller.openstack.neutron import NeutronApi
from kuryr_supervisor.controller.openstack.tagging import Tags
from kuryr_supervisor.controller.openstack.wire import (
    MacInUse,
    OpenStackRefused,
    OpenStackUnavailable,
    Port,
    binding_refused,
    mac_refused,
    named_ours,
)

LOG = logging.getLogger(__name__)

#: The OUI of derived MACs: 0x0e has the locally administered bit (0x02)
#: set and the multicast bit (0x01) clear; no vendor's, nor Neutron's
#: ``fa:16:3e``.
OUI = (0x0E, 0x6B, 0x73)
#: Derivations tried for one pod before its port gets Neutron's MAC.
MAC_TRIES = 8
#: The API extension of ML2's ``tag_ports_during_bulk_creation``.
BULK_TAGS = "tag-ports-during-bulk-creation"


def derived_mac(uid: str, attempt: int = 0) -> str:
    """The MAC of pod ``uid``'s port at its ``attempt``-th derivation."""
    digest = hashlib.sha256(f"{uid}/{attempt}".encode()).digest()
    return ":".join(f"{b:02x}" for b in (*OUI, *digest[:3]))


class MacsRefused(OpenStackRefused):
    """Neutron's policy refused ``mac_address``: nothing was made; from
    now on ports get Neutron's MACs (and lost creates are waited for)."""


@dataclasses.dataclass(frozen=True)
class Want:
    """One port asked for: its name and device (a pod's UID, or a pool's),
    the node to bind it to, and an address and MAC to make it with (a
    vanished port made again), or ``derive``: a MAC derived from its
    device (a pod's port); ``groups``: its security groups (None: the
    project's default group; a pod a NetworkPolicy selects gets its
    policies' from the start,
    :mod:`~kuryr_supervisor.controller.ports.guard`)."""

    name: str
    device_id: str
    host: str = ""
    ip: str = ""
    mac: str = ""
    derive: bool = False
    groups: tuple[str, ...] | None = None


@dataclasses.dataclass
class Modes:
    """What Neutron lets the controller do (None: not known yet)."""

    #: ``binding:host_id`` may be set (until a 403 says otherwise).
    bind: bool = True
    #: Neutron keeps a create's tags (else: set after, by tag calls).
    tags_at_create: bool | None = None
    #: MAC addresses are derived from the pods' UIDs.
    macs: bool | None = None


def _unheard(modes: Modes) -> None:
    """No one hears of the modes."""


class PortMaker:
    """See the module. ``cloud`` makes the calls (each in the caller's
    thread, within the timeout given); the ports go on ``network_id``
    and ``subnet_id``."""

    def __init__(self, cloud: NeutronApi, *, network_id: str,
                 subnet_id: str,
                 on_change: Callable[[Modes], None] | None = None) -> None:
        self.cloud = cloud
        self.network_id, self.subnet_id = network_id, subnet_id
        self.modes = Modes()
        #: Tags set after a create (where Neutron drops a create's).
        self.tags = Tags(cloud)
        #: pod UID -> its derivation in use (after a collision)
        self._attempt: dict[str, int] = {}
        #: Called with the modes whenever they change (readiness).
        self.on_change: Callable[[Modes], None] = on_change or _unheard

    # -- what Neutron allows ------------------------------------------------------
    def detect(self, project_id: str) -> None:
        """Learn at start whether Neutron keeps a create's tags (its
        ``tag-ports-during-bulk-creation`` extension) and whether the
        controller may choose MACs (Neutron's default policy: members of
        the network's project); raises the network's
        :class:`~.wire.NetworkMissing`, or an outage."""
        net = self.cloud.network(self.network_id)
        tags = self.cloud.extension(BULK_TAGS)
        macs = bool(project_id) and net.project_id == project_id
        if self.modes.macs is False:
            macs = False                # a 403 said so: it stays said
        self._set(tags_at_create=tags, macs=macs)

    def _set(self, **changes: bool | None) -> None:
        before = dataclasses.replace(self.modes)
        for key, value in changes.items():
            setattr(self.modes, key, value)
        if self.modes == before:
            return
        if self.modes.tags_at_create is not before.tags_at_create:
            LOG.info("Neutron %s: ports are tagged %s",
                     "keeps a create's tags" if self.modes.tags_at_create
                     else "drops a create's tags (no ML2 extension driver "
                     "tag_ports_during_bulk_creation)",
                     "as they are made" if self.modes.tags_at_create
                     else "right after each create, through the tags API")
        if self.modes.macs is not before.macs:
            LOG.info("MAC addresses: %s", "derived from the pods' UIDs "
                     "(a second create for a pod is refused by Neutron)"
                     if self.modes.macs else "Neutron's (the controller may "
                     "not choose them: lost creates are waited for)")
        self.on_change(dataclasses.replace(self.modes))

    # -- making ---------------------------------------------------------------------
    def make(self, wants: Sequence[Want], *, tags: Sequence[str],
             timeout: float, bulk: bool | None = None) -> list[Port]:
        """Ports for ``wants`` in one request (a bulk create, all or
        nothing, when more than one or ``bulk``), bound, tagged and
        checked (see the module); in ``wants``' order. A port adopted
        after a 409 ``MacAddressInUse`` is returned as a made one."""
        if bulk is None:
            bulk = len(wants) > 1
        made: dict[int, Port] = {}
        # Each refused try adopts a port or moves one pod's derivation on.
        for _ in range(2 * len(wants) + MAC_TRIES + 2):
            todo = [i for i in range(len(wants)) if i not in made]
            if not todo:
                break
            asked = [self._asked(wants[i]) for i in todo]
            try:
                ports = self._post([wants[i] for i in todo], asked, tags,
                                   timeout, bulk=bulk)
            except OpenStackRefused as exc:
                if binding_refused(exc) and self.modes.bind and \
                        any(w.host for w in wants):
                    self.refuse_binding(exc)
                    continue
                if mac_refused(exc) and any(
                        wants[i].derive for i in todo):
                    self._set(macs=False)
                    raise MacsRefused(str(exc), exc.status) from exc
                if isinstance(exc, MacInUse) and self._settle(
                        exc, [wants[i] for i in todo], todo, asked, made,
                        tags, timeout):
                    continue
                raise
            made.update(zip(todo, ports, strict=True))
        if len(made) < len(wants):
            raise MacInUse(f"Neutron refused the MACs of {len(wants) - len(made)}"
                           f" ports {MAC_TRIES} times")
        ports = [made[i] for i in range(len(wants))]
        self._check(ports, wants)
        return self.tagged(ports, tags, timeout)

    def _asked(self, want: Want) -> str:
        """The MAC ``want`` asks for ("" : Neutron's)."""
        if want.mac:
            return want.mac
        if not want.derive or not self.modes.macs:
            return ""
        attempt = self._attempt.get(want.device_id, 0)
        return derived_mac(want.device_id, attempt) \
            if attempt < MAC_TRIES else ""

    def _post(self, wants: Sequence[Want], macs: Sequence[str],
              tags: Sequence[str], timeout: float, *, bulk: bool
              ) -> list[Port]:
        hosts = {w.device_id: w.host for w in wants
                 if w.host and self.modes.bind}
        api = self.cloud.within(timeout)
        if not bulk:
            [want] = wants
            return [api.create_port(
                network_id=self.network_id, subnet_id=self.subnet_id,
                name=want.name, device_id=want.device_id, tags=tags,
                host=hosts.get(want.device_id, ""), ip=want.ip,
                mac=macs[0], security_groups=want.groups)]
        return api.create_ports(
            network_id=self.network_id, subnet_id=self.subnet_id,
            devices=[(w.name, w.device_id) for w in wants], tags=tags,
            hosts=hosts, macs={w.device_id: m for w, m in
                               zip(wants, macs, strict=True) if m},
            groups={w.device_id: w.groups for w in wants
                    if w.groups is not None})

    def _settle(self, exc: MacInUse, wants: Sequence[Want],
                todo: Sequence[int], asked: Sequence[str],
                made: dict[int, Port], tags: Sequence[str],
                timeout: float) -> bool:
        """After a 409 ``MacAddressInUse``: adopt the ports Neutron already
        holds for these devices (an earlier create of theirs committed),
        and give the next derivation to a device whose MAC someone else
        holds. False when nothing changed (the refusal stands)."""
        derived = [(i, w) for i, w in zip(todo, wants, strict=True)
                   if w.derive]
        if not derived:
            return False
        have: dict[str, Port] = {}
        for port in self.cloud.within(timeout).ports_of_devices(
                [w.device_id for _, w in derived],
                network_id=self.network_id):
            if port.device_id not in have and (
                    set(tags) <= set(port.tags) or named_ours(port, tags[0]
                                                              if tags else "")):
                have[port.device_id] = port
        changed = False
        for i, want in derived:
            if want.device_id in have:
                made[i] = have[want.device_id]
                changed = True
        for (i, want), mac in zip(zip(todo, wants, strict=True), asked,
                                  strict=True):
            if i not in made and want.derive and mac and mac == exc.mac:
                self._attempt[want.device_id] = \
                    self._attempt.get(want.device_id, 0) + 1
                LOG.info("MAC %s of pod %s is another port's: its next "
                         "derivation is asked for", mac, want.device_id)
                changed = True
        if have:
            LOG.info("%d ports were already made (a create sent before, "
                     "committed): adopted", len(have))
        return changed

    def _check(self, ports: Sequence[Port], wants: Sequence[Want]) -> None:
        """Neutron's answer binds each port where it was asked to (where
        the answer shows the binding)."""
        for port, want in zip(ports, wants, strict=True):
            if want.host and self.modes.bind and port.host and \
                    port.host != want.host and port.device_id == want.device_id:
                raise OpenStackUnavailable(
                    f"Neutron bound port {port.id} to {port.host}, not to "
                    f"{want.host} as asked")

    # -- tags ---------------------------------------------------------------------------
    def tagged(self, ports: Sequence[Port], tags: Sequence[str],
               timeout: float) -> list[Port]:
        """``ports`` with ``tags`` (:meth:`.tagging.Tags.tagged`); what
        Neutron did with a create's tags says how it treats them."""
        if ports and tags:
            lacking = any(not set(tags) <= set(p.tags) for p in ports)
            self._set(tags_at_create=not lacking and
                      self.modes.tags_at_create is not False)
        return self.tags.tagged(ports, tags, timeout)

    @property
    def untagged(self) -> bool:
        """Some port's tag call failed and is not yet done."""
        return self.tags.pending

    def retag(self) -> None:
        self.tags.retag()

    def recognise(self, ports: Sequence[Port], tag: str,
                  tags_of: Callable[[Port], Sequence[str]]) -> list[Port]:
        return self.tags.recognise(ports, tag, tags_of)

    # -- re-binding --------------------------------------------------------------------
    def refuse_binding(self, why: object) -> None:
        """Neutron refuses ``binding:host_id`` to the controller: ports are
        made unbound from now on (said once)."""
        if self.modes.bind:
            LOG.warning("Neutron refuses binding:host_id to the controller's "
                        "user (%s); ports are made unbound from now on (grant "
                        "a role that may set it to bind them to their node)",
                        why)
            self._set(bind=False)

    def claim(self, port: Port, *, device_id: str, name: str, host: str,
              tags: Sequence[str], timeout: float,
              groups: Sequence[str] | None = None) -> Port:
        """Give ``port`` to ``device_id`` under ``name``, bound to node
        ``host`` when it is not bound there yet, in ``groups`` when not
        None (a pod a NetworkPolicy selects): one update, checked
        applied, and its tags made whole. Without the right to bind, a
        port bound to another node is refused here
        (:class:`WrongNode`), never handed over."""
        api = self.cloud.within(timeout)
        rebind = host if host and port.host != host else ""
        updated: Port | None = None
        while updated is None:
            if rebind and not self.modes.bind:
                if port.host:
                    raise WrongNode(f"port {port.id} is bound to {port.host} "
                                    f"and cannot be bound to {host}", 403)
                rebind = ""
            try:
                updated = api.update_port(port.id, device_id=device_id,
                                          name=name, host=rebind,
                                          security_groups=groups)
            except OpenStackRefused as exc:
                if not (rebind and binding_refused(exc)):
                    raise
                self.refuse_binding(exc)
        if rebind and updated.host and updated.host != rebind:
            raise OpenStackUnavailable(f"Neutron left port {port.id} bound "
                                       f"to {updated.host}, not {rebind}")
        [updated] = self.tagged([updated], tags, timeout)
        return updated


class WrongNode(OpenStackRefused):
    """A port bound to another node cannot be re-bound (no right to bind):
    it is not given to the pod."""
