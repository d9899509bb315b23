"""Metric names: Prometheus conventions, and every name the rules and dashboard query is exported."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.metrics import MetricWrapperBase

from fairsched import Client, Settings, metrics
from fairsched.observe.exporter import ClusterCollector
from fairsched.observe.snapshot import ExporterSettings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SYNTHETIC = {"up"}
"""Series Prometheus itself adds to every target."""


def worker_metrics() -> list[MetricWrapperBase]:
    return [m for m in vars(metrics).values() if isinstance(m, MetricWrapperBase)]


def sample_names(family_name: str, kind: str) -> set[str]:
    """The sample names a family of this type exposes."""
    return {
        "counter": {family_name + "_total", family_name + "_created"},
        "gauge": {family_name},
        "histogram": {family_name + s for s in ("_bucket", "_count", "_sum", "_created")},
        "info": {family_name + "_info"},
    }[kind]


def exported_names(fresh_db: str) -> set[str]:
    names: set[str] = set()
    for metric in worker_metrics():
        for family in metric.describe():
            names |= sample_names(family.name, family.type)
    collector = ClusterCollector(fresh_db, Settings(), ExporterSettings())
    registry = CollectorRegistry()
    registry.register(collector)
    try:
        for family in registry.collect():
            names |= sample_names(family.name, family.type)
    finally:
        collector.close()
    return names


def queried_names() -> dict[str, set[str]]:
    """Every ``fairsched_*`` (or synthetic) series name in the alert rules and the dashboard."""
    exprs: dict[str, list[str]] = {"alerts.yaml": [], "fairsched.json": []}
    alerts = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yaml").read_text("utf-8"))
    exprs["alerts.yaml"] = [rule["expr"] for group in alerts["groups"] for rule in group["rules"]]
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "fairsched.json").read_text("utf-8"))
    exprs["fairsched.json"] = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs["fairsched.json"] += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    found: dict[str, set[str]] = {}
    for source, texts in exprs.items():
        found[source] = {name for text in texts for name in re.findall(r"\bfairsched_[a-z0-9_]+", text)}
    return found


def test_every_queried_metric_is_exported(client: Client, fresh_db: str) -> None:
    exported = exported_names(fresh_db)
    queried = queried_names()
    assert queried["alerts.yaml"] and queried["fairsched.json"]
    for source, names in queried.items():
        missing = names - exported - SYNTHETIC
        assert not missing, f"{source} queries metrics nobody exports: {sorted(missing)}"


def test_the_check_catches_a_misspelled_name(client: Client, fresh_db: str) -> None:
    exported = exported_names(fresh_db)
    assert "fairsched_queue_oldest_claimable_age_seconds" in exported
    assert "fairsched_queue_oldest_claimable_age" not in exported
    assert "fairsched_claims_total" in exported and "fairsched_claims" not in exported


def test_names_follow_prometheus_conventions() -> None:
    for metric in worker_metrics():
        (family,) = metric.describe()
        assert family.name.startswith("fairsched_"), family.name
        if isinstance(metric, Histogram):
            assert family.name.endswith("_seconds"), f"{family.name}: histograms here measure seconds"
        if isinstance(metric, Gauge):
            assert not family.name.endswith("_total"), f"{family.name}: _total is for counters"
        if isinstance(metric, Counter):
            assert f"{family.name}_total" in sample_names(family.name, "counter")
    assert any(isinstance(m, Info) for m in worker_metrics()), "fairsched_build_info"


def test_wait_histograms_reach_well_past_15_seconds() -> None:
    metrics.WAIT_SECONDS.labels("bucket-check")
    metrics.TENANT_WAIT_SECONDS.labels("bucket-check", "other")
    for histogram in (metrics.WAIT_SECONDS, metrics.TENANT_WAIT_SECONDS):
        (family,) = histogram.collect()
        bounds = {
            float(s.labels["le"])
            for s in family.samples
            if s.name.endswith("_bucket") and s.labels["queue"] == "bucket-check"
        }
        assert max(bounds - {float("inf")}) >= 1800
        assert len([b for b in bounds if 15 < b < float("inf")]) >= 4


def test_build_info_names_the_version() -> None:
    version = REGISTRY.get_sample_value(
        "fairsched_build_info", {"version": "0.1.0", "python": __import__("platform").python_version()}
    )
    assert version == 1


def test_tenant_labels_are_bounded_to_declared_tenants() -> None:
    labels = metrics.TenantLabels(["acme", "globex"])
    assert [labels(t) for t in ("acme", "globex", "initech", "t42")] == ["acme", "globex", "other", "other"]
    assert metrics.TenantLabels([f"t{i}" for i in range(500)], limit=10)("t499") == "other"


def test_record_claims_counts_tenants_and_first_attempt_waits(client: Client) -> None:
    for tenant in ("acme", "acme", "initech"):
        client.enqueue("q", {}, tenant=tenant)
    leases = client.claim("q", owner="w", limit=3)
    leases[-1] = leases[-1]._replace(attempt=2)  # a retry: its wait is not enqueue-to-start
    labels = metrics.TenantLabels(["acme"])
    before = {t: _claims("q", t) for t in ("acme", "other")}
    queue_before = (_sample("fairsched_claims_total", queue="q"), _wait_count("q"))
    waits_before = {t: _wait_count("q", t) for t in ("acme", "other")}
    metrics.record_claims(leases, labels)
    assert _claims("q", "acme") - before["acme"] == 2
    assert _claims("q", "other") - before["other"] == 1
    assert _sample("fairsched_claims_total", queue="q") - queue_before[0] == 3
    waits = {t: _wait_count("q", t) - waits_before[t] for t in ("acme", "other")}
    assert sum(waits.values()) == 2
    assert _wait_count("q") - queue_before[1] == 2


def _claims(queue: str, tenant: str) -> float:
    from prometheus_client import REGISTRY

    return (
        REGISTRY.get_sample_value("fairsched_tenant_claims_total", {"queue": queue, "tenant": tenant}) or 0.0
    )


def _wait_count(queue: str, tenant: str | None = None) -> float:
    """Waits observed for ``queue`` (per tenant label, or the queue's own histogram)."""
    if tenant is None:
        return _sample("fairsched_wait_seconds_count", queue=queue)
    return _sample("fairsched_tenant_wait_seconds_count", queue=queue, tenant=tenant)


def _sample(name: str, **labels: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0
