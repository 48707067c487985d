"""What a role of the daemon is: one object naming all the master runs for it.

The master (:class:`~kuryr_supervisor.master.manager.Manager`) is the same
for every role, as cotyledon's model is a list of ``add(service, workers)``
calls and hooks in one place; what differs from one role to the other is
said by its :class:`Role` (:mod:`.cni`, :mod:`.controller`), and nowhere
else:

- its workers and how many of each (:meth:`Role.components`: the slots of
  the shared state, one process each; :meth:`Role.workers`: each kind's
  class and the arguments the master hands it -- the sockets it serves,
  the HealthManager's check factory and base checks, whether the
  HealthManager speaks for the node);
- its listeners (:attr:`Role.listeners`): the sockets the master binds, or
  takes from systemd, before the first fork;
- its preflight checks (:meth:`Role.checks`), run beside every role's
  (:mod:`kuryr_supervisor.master.preflight`) at start and by
  ``check-config``;
- its shared-state sections (:attr:`Role.sections`): the boards its workers
  write and read, the only ones given shared memory;
- its hooks (:meth:`Role.hooks`): on each readiness report, after the last
  worker has stopped, and on the master's way out.

Code below the master that behaves per role is handed what it needs (a
flag, a check factory, the listeners' names), never the role's name. A
role's module imports its workers only when the master assembles them, so
the subcommands that ask a role a question (``status``, ``check-config``)
load no worker, and the CNI role never loads the controller's module.
"""
from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any, ClassVar

from oslo_config import cfg

from kuryr_supervisor.master import preflight
from kuryr_supervisor.state import Component, Section

if TYPE_CHECKING:
    from kuryr_supervisor.master.listeners import Listeners
    from kuryr_supervisor.workers.base import Worker

#: One of the role's kinds of worker and the keyword arguments the master
#: hands each of its processes (besides the state, the configuration and
#: the master's pid, which every worker gets).
Service = tuple["type[Worker]", dict[str, Any]]
#: A check of the configuration against the world that takes nothing (no
#: lock, no bind): raises PreflightError.
Preflight = Callable[[cfg.ConfigOpts], None]


@dataclasses.dataclass(frozen=True)
class Hooks:
    """What the role does in the master around its workers' life. Made
    once per start (:meth:`Role.hooks`): a hook may remember what it did
    (the shim installer, what it installed) for a later one."""

    #: Called with each readiness the master reports (the Reporter's).
    ready: Sequence[Callable[[bool], object]] = ()
    #: Called once the last worker has stopped and the sockets are closed.
    stopped: Sequence[Callable[[], object]] = ()
    #: Called with the master's exit status on its way out (never in a
    #: worker), a start refused by its listeners included.
    exited: Sequence[Callable[[object], object]] = ()


class Role(abc.ABC):
    """One role: see the module."""

    #: The value of ``role`` (``--role``, ``[DEFAULT] role``).
    name: ClassVar[str]
    #: The listeners the master binds (the names of
    #: :mod:`kuryr_supervisor.master.activation`; the probe listener is
    #: every role's).
    listeners: ClassVar[tuple[str, ...]]
    #: The shared-state boards its workers use.
    sections: ClassVar[frozenset[Section]]
    #: Whether it installs the CNI shim on the host (``status`` shows it).
    installs_shim: ClassVar[bool] = False

    @abc.abstractmethod
    def components(self, conf: cfg.ConfigOpts) -> tuple[Component, ...]:
        """The slots of the shared state: one worker process each."""

    @abc.abstractmethod
    def workers(self, conf: cfg.ConfigOpts,
                sockets: Listeners) -> list[Service]:
        """Each kind of worker, in start order, with its arguments;
        ``sockets`` are the master's listeners (:attr:`listeners`)."""

    def checks(self) -> list[Preflight]:
        """The role's own preflight checks that take nothing."""
        return []

    def hooks(self, conf: cfg.ConfigOpts) -> Hooks:
        """This start's hooks (see :class:`Hooks`)."""
        return Hooks()

    # -- what the daemon and check-config run -------------------------------
    def validate(self, conf: cfg.ConfigOpts) -> None:
        """Every preflight check that takes nothing (``check-config``)."""
        preflight.validate(conf, self.checks())

    def preflight(self, conf: cfg.ConfigOpts) -> IO[str]:
        """Every preflight check; returns the held state-directory lock."""
        return preflight.run(conf, serves=self.listeners,
                             checks=self.checks())
