"""A job's read lost right after its write: the next job reads what the
write made before writing again (the services handler in this process,
against the Kubernetes API fake and the Octavia fake over real HTTP,
tests/fixtures/servicehandler.py).

Seen on the real stack (benchmarks/services.py, 100 EndpointSlices
changed under load): Octavia took a pool's members, the status read that
followed was reset, and the job tried again 12 s later wrote the same
members a second time."""
from __future__ import annotations

from typing import Any

from kuryr_supervisor.controller.openstack.lbwire import Member
from tests.fixtures.octavia import _Error
from tests.fixtures.servicehandler import World, until
from tests.unit import test_services_handler as handler_tests

VIP = "10.96.0.11"
MEMBERS = "PUT /v2/lbaas/pools/{id}/members"

#: The handler tests' fixtures: the API fake, the handler over it.
api, world = handler_tests.api, handler_tests.world


def test_a_read_lost_after_a_write_is_not_written_again(world: World) -> None:
    fake = world.octavia.fake
    assert fake is not None
    one, two = world.octavia.member(1), world.octavia.member(2)
    uid = world.service("web", VIP, ("http", "TCP", 80))
    world.endpoints("web", one, two, ports={"http": 8080})
    running = world.start()
    world.ready_after(running)
    world.settled(uid, {("TCP", 80): {Member(one, 8080), Member(two, 8080)}})

    # The first status read after the members' write fails (a reset
    # connection: a 503 here); the handler's reads after it are counted.
    route, lost, after = fake._route, [], []

    def flaky(method: str, parts: list[str], query: dict[str, str],
              body: Any) -> tuple[int, Any]:
        if method == "GET" and parts[2:] == ["status"]:
            if fake.writes(since)[MEMBERS] and not lost:
                lost.append(parts[1])
                raise _Error(503, "connection reset")
            if lost:
                after.append(parts[1])
        return route(method, parts, query, body)
    since = fake.accepted[-1][0] + 1e-6
    fake._route = flaky  # type: ignore[method-assign]
    # One endpoint replaced by another: the pool's batch (a member added
    # or deleted alone is its own write, read alike).
    three = world.octavia.member(3)
    world.endpoints("web", one, three, ports={"http": 8080})
    # The job tried again (after its backoff) and ended as wanted.
    reconciler = running.handler.reconciler
    until(lambda: after and reconciler.outcomes.not_before(uid) == 0.0
          and uid not in reconciler.running and uid not in reconciler.pending,
          timeout=20)
    fake._route = route  # type: ignore[method-assign]
    world.settled(uid, {("TCP", 80): {Member(one, 8080), Member(three, 8080)}})
    assert fake.writes(since) == {MEMBERS: 1}
