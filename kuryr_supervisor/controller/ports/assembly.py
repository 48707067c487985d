"""The ``neutron_port`` handler's build function (its entry point).

Every collaborator of :class:`~.handler.NeutronPortHandler` is built here,
once the process's clients exist (:class:`~kuryr_supervisor.controller.
runtime.Runtime`), and passed to a constructor: nothing is wired after
construction. The order is the dependencies': the report, then the
PodPort writer and the status (which share what each PodPort says), the
port maker (whose modes the report tells), the scope of our ports, the
pools and their refill, the NetworkPolicy guard (only where the
``network_policy`` handler runs too: :mod:`.guard`), the provisioning
step, the handler.
"""
from __future__ import annotations

from kuryr_supervisor.controller.openstack.making import PortMaker
from kuryr_supervisor.controller.openstack.pace import Pace
from kuryr_supervisor.controller.pools.portpools import PortPools
from kuryr_supervisor.controller.pools.refill import Refill
from kuryr_supervisor.controller.ports.batch import MAX_PORTS, Batch
from kuryr_supervisor.controller.ports.book import PodBook
from kuryr_supervisor.controller.ports.gone import Gone
from kuryr_supervisor.controller.ports.guard import PolicyGuard, wanted
from kuryr_supervisor.controller.ports.handler import NeutronPortHandler
from kuryr_supervisor.controller.ports.owned import OwnedPorts
from kuryr_supervisor.controller.ports.podports import PodPortWriter
from kuryr_supervisor.controller.ports.provision import Provision
from kuryr_supervisor.controller.ports.report import PortReport
from kuryr_supervisor.controller.ports.retry import Retries
from kuryr_supervisor.controller.ports.status import PortStatus
from kuryr_supervisor.controller.runtime import Runtime


def build(rt: Runtime, *, batch: Batch | None = None) -> NeutronPortHandler:
    """The handler of ``rt``'s process; ``batch``: how pods are gathered
    into creates (a test's clock), by default the standard one."""
    conf, ctx = rt.conf, rt.ctx
    opts = conf.controller
    client, cloud = rt.kubernetes(), rt.openstack()
    report = PortReport(client, ctx.state)
    said: dict[str, str] = {}           # uid -> the status its PodPort says
    writer = PodPortWriter(client, on_said=said.__setitem__)
    status = PortStatus(report, said=said, busy=writer.saying)
    maker = PortMaker(cloud, network_id=opts.pod_network_id,
                      subnet_id=opts.pod_subnet_id,
                      on_change=report.made_with)
    owned = OwnedPorts(client, cloud, network_id=opts.pod_network_id,
                       project_id=str(opts.project_id),
                       cluster_id=opts.cluster_id, beat=rt.beat, maker=maker)
    pace = Pace.from_conf(conf, size=MAX_PORTS)
    pools = PortPools(conf, getattr(ctx.state, "pools", None), maker=maker,
                      tag=lambda: str(owned.tag),
                      guarded=wanted(opts.handlers))
    retries = Retries(rt)
    book = PodBook()
    guard = PolicyGuard(cloud, client, tag=owned.cluster_tag) \
        if wanted(opts.handlers) else None
    provision = Provision(
        book, cloud=cloud, maker=maker, writer=writer, owned=owned,
        pools=pools, pace=pace, retries=retries, report=report,
        status=status, announcer=ctx.announcer, fence=ctx.fence,
        in_flight=int(opts.port_create_requests), beat=rt.beat, guard=guard)
    return NeutronPortHandler(
        rt, client=client, cloud=cloud, book=book, pace=pace, report=report,
        status=status, retries=retries,
        batch=Batch() if batch is None else batch, maker=maker,
        owned=owned, gone=Gone(client, report, beat=rt.beat),
        provision=provision, pools=pools,
        refill=Refill(pools, cloud, owned, pace, maker))
