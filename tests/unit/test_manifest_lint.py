"""checkov's Kubernetes checks on every rendered kustomization: no failed
check, and every skipped one skipped in the manifest with its reason
(``checkov.io/skip<N>: CKV_K8S_xx=reason`` annotations)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures import checkov, docs, kustomize

MANIFESTS = Path(__file__).parents[2] / "etc" / "kubernetes"
# The first run makes checkov's venv (pip, from the index): minutes.
pytestmark = [pytest.mark.timeout(900), pytest.mark.manifests]
COMPONENTS = sorted(p.name for p in (MANIFESTS / "components").iterdir()
                    if (p / "kustomization.yaml").exists())


def render_all(tmp_path: Path) -> Path:
    """Every kustomization, rendered by kubectl, one file each; the
    components through the base (as an overlay uses them)."""
    out = tmp_path / "rendered"
    out.mkdir()
    for name in ("base", "controller", "overlays/example"):
        docs = kustomize.build(MANIFESTS / name)
        (out / f"{name.replace('/', '-')}.yaml").write_text(
            yaml.safe_dump_all(docs, sort_keys=False))
    wrapper = tmp_path / "with-components"
    wrapper.mkdir()
    (wrapper / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(MANIFESTS / "base", wrapper)],
        "components": [os.path.relpath(MANIFESTS / "components" / c, wrapper)
                       for c in COMPONENTS]}))
    (out / "components.yaml").write_text(
        yaml.safe_dump_all(kustomize.build(wrapper), sort_keys=False))
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = render_all(tmp_path_factory.mktemp("lint"))
    merged: dict[str, list[dict[str, Any]]] = {
        "passed_checks": [], "failed_checks": [], "skipped_checks": []}
    for path in sorted(out.glob("*.yaml")):
        found = checkov.scan(path)
        for key in merged:
            merged[key] += found.get(key, [])
    return merged


def describe(check: dict[str, Any]) -> str:
    return f"{check['check_id']} {check['resource']}: {check['check_name']}"


def test_no_failed_check(results: dict[str, Any]) -> None:
    assert results["passed_checks"], "checkov ran no check"
    failed = sorted({describe(c) for c in results["failed_checks"]})
    assert not failed, "\n".join(failed)


def test_every_skip_has_a_reason(results: dict[str, Any]) -> None:
    skipped = results["skipped_checks"]
    assert skipped
    for check in skipped:
        reason = check.get("check_result", {}).get("suppress_comment", "")
        assert reason and reason != "No comment provided", describe(check)
        assert len(reason) <= 120 and "\n" not in reason, describe(check)


def test_a_failing_manifest_fails(tmp_path: Path) -> None:
    """The scan can fail: the DaemonSet without its skip annotations and
    with privileged: true is refused."""
    (ds,) = [d for d in kustomize.build(MANIFESTS / "base")
             if d["kind"] == "DaemonSet"]
    del ds["metadata"]["annotations"]
    ds["spec"]["template"]["spec"]["containers"][0]["securityContext"][
        "privileged"] = True
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(ds))
    failed = {c["check_id"] for c in checkov.scan(path)["failed_checks"]}
    assert {"CKV_K8S_16", "CKV_K8S_19", "CKV_K8S_39"} <= failed


def test_skips_are_the_documented_ones(results: dict[str, Any]) -> None:
    """The documented table of skipped checks is the manifests' list."""
    readme = docs.text()
    for check in results["skipped_checks"]:
        assert f"``{check['check_id']}``" in readme, describe(check)
