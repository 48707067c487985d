"""Every OpenStack timeout, from its options, decided here alone.

``[controller] openstack_timeout`` and ``[neutron] timeout`` are read
here and nowhere else, and each bound below is derived from them by one
rule:

- the *request timeout* (:func:`request_timeout`): every socket operation
  of a Keystone token request, a version discovery, a Neutron or an
  Octavia request; ``openstack_timeout``, or ``[neutron] timeout`` when
  that is set and shorter;
- a port create's timeout: the request timeout plus a share per port
  (:class:`~.pace.Pace`, built from the request timeout: the pods' and the
  pools' creates alike);
- the *whole-call deadline* of one public call of the adapter (discovery,
  token and request back to back, :mod:`.deadline`): three request
  timeouts (:func:`call_deadline`);
- a readiness check of Keystone, Neutron or Octavia waits at most the
  request timeout, and never more than a quarter of ``[supervisor]
  health_deadline`` (:func:`check_wait`: the checks together never make
  the HealthManager stale); the checks' own adapter is built with a
  whole-call deadline within that wait (:func:`check_call_deadline`), so
  a hung call fails inside the check, with the adapter's words naming
  Keystone, Neutron or Octavia.
"""
from __future__ import annotations

from oslo_config import cfg

from kuryr_supervisor.conf import controller as controller_conf

#: Requests of one public call (discovery, token, request) a deadline allows.
CALLS = 3
#: The checks' adapter answers within this share of the check's wait.
CHECK_SHARE = 0.8


def request_timeout(conf: cfg.ConfigOpts) -> float:
    """The request timeout (see the module)."""
    timeout = float(conf.controller.openstack_timeout)
    controller_conf.register_neutron(conf)
    group = controller_conf.NEUTRON_GROUP
    if group in conf and conf[group].timeout:
        timeout = min(timeout, float(conf[group].timeout))
    return timeout


def call_deadline(request: float) -> float:
    """The whole-call deadline for a request timeout of ``request``."""
    return CALLS * request


def check_wait(conf: cfg.ConfigOpts) -> float:
    """Seconds one readiness check of Keystone or Neutron may wait."""
    return min(request_timeout(conf),
               float(conf.supervisor.health_deadline) / 4)


def check_call_deadline(conf: cfg.ConfigOpts) -> float:
    """The whole-call deadline of the checks' adapter."""
    return min(call_deadline(request_timeout(conf)),
               CHECK_SHARE * check_wait(conf))
