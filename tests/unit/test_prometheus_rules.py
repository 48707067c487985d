"""The alert rules (etc/prometheus) and the dashboard (etc/grafana) by
promtool: rules valid, every alert firing on a fault and silent on a
healthy series in ``promtool test rules``, the PrometheusRule identical to
the plain rules file, and every dashboard query valid PromQL."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.fixtures import kustomize
from tests.fixtures import promtool as pt

RUNBOOK = (pt.ROOT / "doc/source/admin/alerts.rst").read_text()


def test_promtool_checks_the_rules() -> None:
    done = pt.run("check", "rules", str(pt.RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(pt.alerts())} rules found" in done.stdout


def test_the_unit_tests_pass() -> None:
    files = sorted(pt.RULE_TESTS.glob("*.yaml"))
    assert files
    done = pt.run("test", "rules", *map(str, files))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_unit_tests_can_fail(tmp_path: Path) -> None:
    """A rule that never fires fails its test: the tests test the rules."""
    broken = yaml.safe_load(pt.RULES.read_text())
    for rule in broken["groups"][0]["rules"]:
        if rule["alert"] == "KuryrSupervisorNotReady":
            rule["expr"] = "kuryr_supervisor_ready == 2"
    (tmp_path / "kuryr-supervisor.rules.yaml").write_text(yaml.safe_dump(broken))
    tests = tmp_path / "tests"
    tests.mkdir()
    for path in pt.RULE_TESTS.glob("*.yaml"):
        (tests / path.name).write_text(path.read_text())
    done = pt.run("test", "rules", *map(str, sorted(tests.glob("*.yaml"))))
    assert done.returncode != 0
    assert "KuryrSupervisorNotReady" in done.stdout + done.stderr


def test_every_alert_fires_and_stays_silent() -> None:
    fires: set[str] = set()
    silent: set[str] = set()
    for path in pt.RULE_TESTS.glob("*.yaml"):
        spec = yaml.safe_load(path.read_text())
        assert spec["rule_files"] == ["../kuryr-supervisor.rules.yaml"]
        for test in spec["tests"]:
            for case in test.get("alert_rule_test", []):
                (fires if case["exp_alerts"] else silent).add(case["alertname"])
                for alert in case["exp_alerts"]:
                    # Healthy series beside the faulty one stay silent too:
                    # one instance fires, never all of them.
                    assert alert["exp_labels"]["instance"]
    names = {a["alert"] for a in pt.alerts()}
    assert names == fires == silent


def test_alerts_follow_the_conventions() -> None:
    names = [a["alert"] for a in pt.alerts()]
    assert len(names) == len(set(names)) == 12
    for alert in pt.alerts():
        name = alert["alert"]
        assert re.fullmatch(r"KuryrSupervisor(?:[A-Z][a-z]*|CNI|IPAM)+", name), name
        assert alert["labels"]["severity"] in {"info", "warning", "critical"}
        notes = alert["annotations"]
        assert set(notes) == {"summary", "description", "runbook_url"}, name
        assert notes["summary"].endswith(".") and "\n" not in notes["summary"]
        # The runbook is a section of the docs' alerts page (an explicit
        # target per alert), relative to where the HTML is published.
        assert notes["runbook_url"] == f"admin/alerts.html#{name.lower()}"
        assert f".. _{name}:" in RUNBOOK, name


@pytest.mark.manifests
def test_prometheusrule_holds_the_same_rules() -> None:
    (doc,) = kustomize.build(pt.PROMETHEUS_RULE.parent)
    assert (doc["apiVersion"], doc["kind"]) == ("monitoring.coreos.com/v1",
                                                "PrometheusRule")
    assert doc["spec"]["groups"] == pt.rule_groups()


def test_dashboard_queries_are_promql(tmp_path: Path) -> None:
    """promtool parses each query as a recording rule's expression."""
    queries = list(pt.dashboard_queries())
    assert len(queries) >= 12
    rules = [{"record": f"dashboard:query_{i}:expr", "expr": pt.as_promql(q)}
             for i, (_, q) in enumerate(queries)]
    for rule in rules:
        assert "$" not in rule["expr"], rule
    path = tmp_path / "dashboard.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard",
                                                "rules": rules}]}))
    done = pt.run("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout
    # ... and refuses what is not PromQL.
    path.write_text(yaml.safe_dump({"groups": [{"name": "bad", "rules": [
        {"record": "bad:query", "expr": "sum by (le (rate(x[5m]))"}]}]}))
    assert pt.run("check", "rules", str(path)).returncode != 0


def test_dashboard_shows_what_the_issue_asks() -> None:
    used = set()
    for _, query in pt.dashboard_queries():
        used |= pt.metric_names(query)
    assert {"kuryr_supervisor_cni_requests_total",
            "kuryr_supervisor_cni_request_duration_seconds_bucket",
            "kuryr_supervisor_worker_restarts_total",
            "kuryr_supervisor_worker_memory_uss_bytes",
            "kuryr_supervisor_ipam_allocated_addresses",
            "kuryr_supervisor_watch_relists_total"} <= used


def test_dashboard_has_the_latency_heatmaps() -> None:
    dash = json.loads(pt.DASHBOARD.read_text())
    heatmaps = [p for p in dash["panels"] if p["type"] == "heatmap"]
    commands = set()
    for panel in heatmaps:
        (target,) = panel["targets"]
        assert target["format"] == "heatmap"
        assert "sum by (le)" in target["expr"]
        commands |= set(re.findall(r'command="(\w+)"', target["expr"]))
    assert commands == {"ADD", "DEL"}
