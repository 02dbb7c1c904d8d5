"""SPEC part M: the shipped dashboard and alert rules use only metrics the service exports.

"Renaming one means updating the shipped Grafana dashboard and alert rules in the same
change": these tests make a rename without that update fail.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.observability.metrics import METRIC_NAMES, TidemarkMetrics

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "helm/tidemark/files/grafana/tidemark-dashboard.json"
RULES = ROOT / "helm/tidemark/files/prometheus/tidemark-rules.yaml"
RULE_TESTS = Path(__file__).with_name("alert_rules_test.yml")

NAME = re.compile(r"\btidemark_[a-z0-9_]*[a-z0-9]")
HISTOGRAM_SUFFIX = re.compile(r"_(bucket|sum|count)$")


def metric_names(promql: str) -> set[str]:
    """Names starting tidemark_ in a PromQL expression, histogram series mapped to the family."""
    names = set()
    for name in NAME.findall(promql):
        family = HISTOGRAM_SUFFIX.sub("", name)
        names.add(family if family in METRIC_NAMES else name)
    return names


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    queries += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return queries


def rule_expressions() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def exported_names() -> set[str]:
    """Families the service really exports, every metric touched once."""
    m = TidemarkMetrics()
    m.set_build_info("0", "p.sql")
    m.set_waterline("t", "c", 1, "ms", now_ms=2)
    m.declare_table("t", "topic")
    m.declare_output("v", "out")
    m.set_output_waterline("v", 1)
    m.set_state("v", 1, 1)
    m.observe_step(0.1)
    m.set_input_lag("topic", 0, 1)
    m.set_query_up("q", True)
    names = set()
    for family in m.registry.collect():
        for s in family.samples:
            if s.name.endswith("_created"):  # prometheus-client's creation-time series
                continue
            names.add(HISTOGRAM_SUFFIX.sub("", s.name) if family.type == "histogram" else s.name)
    return names


def test_metric_name_parser_finds_names_and_strips_histogram_suffixes() -> None:
    assert metric_names(
        'histogram_quantile(0.99, sum by (le) (rate(tidemark_step_duration_seconds_bucket[5m])))'
        ' / on (table) tidemark_input_records_total{table=~"$table"}'
    ) == {"tidemark_step_duration_seconds", "tidemark_input_records_total"}
    assert metric_names('tidemark_query_upp{x="tidemark_nope"}') == {
        "tidemark_query_upp", "tidemark_nope"}


def test_part_m_every_metric_the_dashboard_uses_is_exported() -> None:
    used = set().union(*(metric_names(q) for q in dashboard_queries()))
    assert used, "the dashboard has no tidemark_ queries"
    assert used <= exported_names(), f"not exported: {sorted(used - exported_names())}"


def test_part_m_every_metric_the_alert_rules_use_is_exported() -> None:
    used = set().union(*(metric_names(e) for e in rule_expressions()))
    assert used <= exported_names(), f"not exported: {sorted(used - exported_names())}"


def test_part_m_the_dashboard_shows_every_exported_metric() -> None:
    used = set().union(*(metric_names(q) for q in dashboard_queries()))
    assert exported_names() <= used, f"no panel for: {sorted(exported_names() - used)}"


def test_dashboard_is_grafana_json_with_a_prometheus_datasource_variable() -> None:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    assert dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool missing: run scripts/install-prometheus.sh")
    return path


def test_promtool_check_rules_passes() -> None:
    result = subprocess.run([promtool(), "check", "rules", str(RULES)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rule_expressions())} rules found" in result.stdout


def test_each_alert_fires_on_its_failure_and_not_on_the_healthy_twin() -> None:
    result = subprocess.run([promtool(), "test", "rules", str(RULE_TESTS)],
                            capture_output=True, text=True, timeout=60, cwd=RULE_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    assert tested == alerts


SELECTOR = re.compile(r"\b(tidemark_[a-z0-9_]*[a-z0-9])(\{[^}]*\})?")
GROUPING = re.compile(r"\b(?:by|on) \(([^)]*)\)")


def test_every_alert_selector_and_aggregation_is_scoped_by_namespace_and_job() -> None:
    """The chart replaces the generic matchers with its release's (helm/tidemark, monitoring
    template), so a selector without them would see every release's series."""
    for expr in rule_expressions():
        selectors = SELECTOR.findall(expr)
        assert selectors, expr
        for name, matchers in selectors:
            assert matchers.startswith('{namespace=~".*", job=~".+"'), (name, expr)
        for grouping in GROUPING.findall(expr):
            assert {"namespace", "job"} <= {g.strip() for g in grouping.split(",")}, expr


def test_every_alert_links_to_its_runbook_section() -> None:
    doc = (ROOT / "docs" / "observability.md").read_text()
    alerts_part = doc[doc.index("\n## Alerts\n"):]
    anchors = {"#" + re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")
               for heading in re.findall(r"^### (.+)$", alerts_part, re.MULTILINE)}
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            url = rule["annotations"]["runbook_url"]
            assert url == f"docs/observability.md#{rule['alert'].lower()}", rule["alert"]
            assert url.removeprefix("docs/observability.md") in anchors, rule["alert"]


def test_every_dashboard_query_selects_the_namespace_release_and_job_variables() -> None:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    variables = [v["name"] for v in dashboard["templating"]["list"]]
    assert variables[:4] == ["datasource", "namespace", "release", "job"]
    scope = '{namespace=~"$namespace", release=~"$release", job=~"$job"'
    panels = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for query in panels:
        for name, matchers in SELECTOR.findall(query):
            assert matchers.startswith(scope), (name, query)
    for variable in dashboard["templating"]["list"]:
        if variable["name"] in ("table", "view"):
            assert scope[1:] in variable["definition"], variable["name"]


def test_part_m_the_docs_name_only_metrics_the_service_exports() -> None:
    """A metric named in the documentation (an alert to write, a panel to read) exists."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    named = {(path.relative_to(ROOT).as_posix(), name)
             for path in docs for name in metric_names(path.read_text())}
    unknown = sorted((path, name) for path, name in named if name not in METRIC_NAMES)
    assert not unknown, f"not metrics of app/observability/metrics.py: {unknown}"
