"""deploy/: the structure of every manifest, unit and dashboard (no container engine here)."""

from __future__ import annotations

import configparser
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from fairsched.settings import load_settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S = DEPLOY / "kubernetes"


def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text("utf-8")) if doc is not None]


def k8s_objects() -> dict[tuple[str, str], dict[str, Any]]:
    objects = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in load_all(path):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in objects, f"{key} defined twice"
            objects[key] = doc
    return objects


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return obj["spec"]["template"]["spec"]["containers"]  # type: ignore[no-any-return]


def test_dockerfile_is_multi_stage_slim_and_non_root() -> None:
    text = (DEPLOY / "Dockerfile").read_text("utf-8")
    froms = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    assert len(froms) >= 2 and all(image.endswith("-slim") for image in froms), froms
    users = re.findall(r"^USER (\S+)", text, re.MULTILINE)
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert re.search(r'^ENTRYPOINT \["fairsched"\]', text, re.MULTILINE)
    for source in re.findall(r"^COPY (?!--from)(\S+)", text, re.MULTILINE):
        assert (DEPLOY.parent / source).exists(), f"COPY {source}: no such file in the repository"


def test_compose_runs_the_whole_stack() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text("utf-8"))
    services = compose["services"]
    assert {"postgres", "migrate", "worker", "exporter", "prometheus", "grafana"} <= set(services)
    for name in ("worker", "exporter"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "--metrics-port" in services["worker"]["command"]
    assert services["exporter"]["command"][0] == "exporter"
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"compose mounts missing {source}"
    config = load_settings(DEPLOY / "compose.toml")
    assert "bench" in config.queues, "the built-in no-op handlers serve queue bench"


def test_prometheus_scrapes_workers_and_exporter() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text("utf-8"))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"fairsched-worker", "fairsched-exporter"}
    assert jobs["fairsched-exporter"]["static_configs"][0]["targets"] == ["exporter:9464"]


def test_kubernetes_workloads_are_probed_non_root_and_wired_to_the_secret() -> None:
    objects = k8s_objects()
    worker = objects[("Deployment", "fairsched-worker-emails")]
    exporter = objects[("Deployment", "fairsched-exporter")]
    for workload in (worker, exporter, objects[("Job", "fairsched-migrate")]):
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for container in pod["containers"]:
            env = {e["name"]: e for e in container["env"]}
            assert env["FAIRSCHED_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "fairsched-database"
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
    (container,) = containers(worker)
    assert container["readinessProbe"]["httpGet"]["path"] == "/metrics"
    assert "livenessProbe" in container
    args = container["args"]
    port = int(args[args.index("--metrics-port") + 1])
    assert {p["containerPort"] for p in container["ports"]} == {port}
    assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > 30, "beyond the grace period"
    assert exporter["spec"]["replicas"] == 1
    service = objects[("Service", "fairsched-exporter")]
    labels = exporter["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_keda_scales_the_worker_on_claimable_backlog_with_the_postgresql_scaler() -> None:
    objects = k8s_objects()
    scaled = objects[("ScaledObject", "fairsched-worker-emails")]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert ("Deployment", scaled["spec"]["scaleTargetRef"]["name"]) in objects
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "postgresql"
    assert ("TriggerAuthentication", trigger["authenticationRef"]["name"]) in objects
    query = trigger["metadata"]["query"]
    assert "status = 'pending'" in query and "available_at <= now()" in query and "LIMIT" in query
    assert float(trigger["metadata"]["targetQueryValue"]) > 0


def test_keda_query_runs_and_counts_claimable_plus_running(client: Any) -> None:
    """The ScaledObject's query, on a real database: claimable jobs of every priority plus
    running ones; delayed jobs excluded, also at a priority above the claimable ones.
    Its plan at 1M jobs: ``tests/db/test_operator_plans.py``."""
    from datetime import UTC, datetime, timedelta

    client.declare_queue("emails")
    for priority, tenant in enumerate(("a", "b", "c")):
        client.enqueue("emails", {}, tenant=tenant, priority=priority)
    client.enqueue("emails", {}, tenant="d", priority=9, run_at=datetime.now(UTC) + timedelta(hours=1))
    client.enqueue("emails", {}, tenant="e", priority=1, run_at=datetime.now(UTC) + timedelta(hours=1))
    client.claim("emails", owner="w", limit=1)
    query = k8s_objects()[("ScaledObject", "fairsched-worker-emails")]["spec"]["triggers"][0]["metadata"][
        "query"
    ]
    with client.connection() as conn:
        (value,) = conn.execute(query).fetchone()
    assert value == 3


def test_monitors_select_the_workloads() -> None:
    objects = k8s_objects()
    pod_labels = objects[("Deployment", "fairsched-worker-emails")]["spec"]["template"]["metadata"]["labels"]
    podmonitor = objects[("PodMonitor", "fairsched-worker")]
    assert podmonitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert podmonitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    servicemonitor = objects[("ServiceMonitor", "fairsched-exporter")]
    service_labels = objects[("Service", "fairsched-exporter")]["metadata"]["labels"]
    assert servicemonitor["spec"]["selector"]["matchLabels"].items() <= service_labels.items()


def test_prometheusrule_matches_alerts_file() -> None:
    alerts = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yaml").read_text("utf-8"))
    rule = k8s_objects()[("PrometheusRule", "fairsched")]
    assert rule["spec"]["groups"] == alerts["groups"], "regenerate kubernetes/prometheusrule.yaml"


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text("utf-8"))
    manifests = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests


def test_every_alert_has_a_runbook_section_and_promtool_tests() -> None:
    alerts = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yaml").read_text("utf-8"))
    tests = yaml.safe_load((DEPLOY / "prometheus" / "alerts_test.yaml").read_text("utf-8"))
    operations = (DEPLOY.parent / "docs" / "operations.md").read_text("utf-8")
    headings = {
        re.sub(r"[^a-z0-9]", "", h.lower()) for h in re.findall(r"^#+ (.+)$", operations, re.MULTILINE)
    }
    for rule in (r for group in alerts["groups"] for r in group["rules"]):
        name = rule["alert"]
        assert rule["annotations"]["runbook"] == f"docs/operations.md#{name.lower()}"
        assert name.lower() in headings, f"docs/operations.md has no section {name}"
        cases = [c for t in tests["tests"] for c in t["alert_rule_test"] if c["alertname"] == name]
        assert any(c["exp_alerts"] for c in cases), f"no promtool test where {name} fires"
        assert any(not c["exp_alerts"] for c in cases), f"no promtool test where {name} stays silent"


@pytest.mark.parametrize("unit", sorted((DEPLOY / "systemd").glob("*.service")), ids=lambda p: p.name)
def test_systemd_units_run_fairsched_unprivileged(unit: Path) -> None:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(unit.read_text("utf-8"))
    service = parser["Service"]
    assert service["User"] == "fairsched"
    assert service["ExecStart"].split()[1] in ("worker", "exporter")
    assert service["KillSignal"] == "SIGTERM"
    assert service["NoNewPrivileges"] == "true"
    assert parser["Install"]["WantedBy"] == "multi-user.target"


def test_dashboard_has_the_required_panels() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "fairsched.json").read_text("utf-8"))
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    exprs = " ".join(t["expr"] for p in panels for t in p["targets"])
    for needed in (
        "fairsched_tenant_entitled_share_ratio",
        "fairsched_tenant_wait_seconds_bucket",
        "fairsched_queue_oldest_claimable_age_seconds",
        "fairsched_queue_dead_jobs",
        "fairsched_queue_blocked_aggregates",
    ):
        assert needed in exprs, needed
    for panel in panels:
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(set(ref_ids)) == len(ref_ids), panel["title"]


def test_configmap_holds_a_valid_configuration(tmp_path: Path) -> None:
    configmap = k8s_objects()[("ConfigMap", "fairsched-config")]
    path = tmp_path / "fairsched.toml"
    path.write_text(configmap["data"]["fairsched.toml"], "utf-8")
    settings = load_settings(path)
    worker = containers(k8s_objects()[("Deployment", "fairsched-worker-emails")])[0]["args"]
    served = worker[worker.index("--queue") + 1].split("=")[0]
    assert served in settings.queues
