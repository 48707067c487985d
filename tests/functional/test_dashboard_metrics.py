"""Every metric the dashboard (etc/grafana) and the alert rules
(etc/prometheus) name is served by a live daemon's /metrics (a CNI daemon,
or a controller whose network judge leads); the controller's dependency
checks the OpenStack alert selects exist on a live controller."""
from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures import promtool as pt
from tests.fixtures.controller import controller_daemon, start_cloud
from tests.fixtures.daemon import Daemon, wait_until

pytestmark = pytest.mark.privileged

#: Series Prometheus makes itself, not the daemon.
SYNTHETIC = {"up"}
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"),
            "info": ("_info",)}


def _get(port: int) -> str | None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        assert resp.status == 200
        return resp.read().decode()
    except ConnectionRefusedError:
        return None
    finally:
        conn.close()


def scrape(port: int) -> str:
    """/metrics on the metrics listener. The HealthManager binds it just
    after the probe listener, so /ready may answer a moment before it."""
    text: str = wait_until(lambda: _get(port), 10, interval=0.05)
    return text


def served(text: str) -> tuple[set[str], dict[str, set[tuple[str, ...]]]]:
    """Names a query can select (a family is served even before its first
    sample, e.g. no CNI request yet), and each name's label sets."""
    names: set[str] = set()
    labels: dict[str, set[tuple[str, ...]]] = {}
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names |= {family.name + s for s in SUFFIXES.get(family.type, ())}
        for sample in family.samples:
            names.add(sample.name)
            labels.setdefault(sample.name, set()).add(
                tuple(sorted(f"{k}={v}" for k, v in sample.labels.items())))
    return names, labels


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path).start()
    yield d
    d.close()


def judging_controller(tmp_path: Path) -> str:
    """/metrics of a controller whose network judge has judged (its
    figures are served once it leads and has listed the nodes' records)."""
    cloud = start_cloud()
    cloud.api.add_node("node-a")
    ctl = controller_daemon(tmp_path / "ctl", cloud, {
        "controller": {"handlers": "neutron_port,network_health"}})
    try:
        ctl.start().wait_ready(30)

        def judged() -> str | None:
            text = scrape(ctl.metrics_port)
            return text if "kuryr_supervisor_network_nodes" in text else None
        text: str = wait_until(judged, 20)
        return text
    finally:
        ctl.close()
        cloud.stop()


def test_dashboard_and_alerts_name_served_metrics(daemon: Daemon,
                                                  tmp_path: Path) -> None:
    daemon.wait_ready()
    names, _ = served(scrape(daemon.metrics_port))
    names |= served(judging_controller(tmp_path))[0]
    queries = list(pt.dashboard_queries()) + [
        (f"alert {a['alert']}", a["expr"]) for a in pt.alerts()]
    for where, query in queries:
        used = pt.metric_names(query)
        assert used or "up{" in query, where
        missing = used - names
        assert not missing, f"{where}: {sorted(missing)} not served"
    # The check can fail: a name the daemon does not serve is caught.
    assert "kuryr_supervisor_cni_request_total" not in names


def test_openstack_alert_selects_the_controller_checks(tmp_path: Path) -> None:
    cloud = start_cloud()
    ctl = controller_daemon(tmp_path / "ctl", cloud)
    try:
        ctl.start().wait_ready(30)

        def checks() -> set[str] | None:
            _, labels = served(scrape(ctl.metrics_port))
            names = {dict(p.split("=", 1) for p in s)["check"]
                     for s in labels.get("kuryr_supervisor_check_ok", set())}
            return names if {"keystone", "neutron"} <= names else None
        assert wait_until(checks, 20)
    finally:
        ctl.close()
        cloud.stop()
