"""The chart for many releases: values checked by values.schema.json, `helm test`, disruption
budgets, a PodMonitor beside the ServiceMonitor, a dashboard and alert rules per release, and
two releases in one namespace that share no object name, dashboard uid or alert.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_support import CHART, ROOT, K8sTools, helm_run, manifests, one, render

from app.observability.metrics import TidemarkMetrics
from app.observability.server import MetricsServer

BAD_VALUES = Path(__file__).with_name("bad-values")
KUBERNETES = CHART / "ci" / "kubernetes-values.yaml"
MONITORING = ("metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true")
PYTHON = str(ROOT / ".venv" / "bin" / "python")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ("wrong-type.yaml", "at '/settings/maxRecordsPerStep': got string, want integer"),
        ("unknown-key.yaml", "at '/kafka': additional properties 'bootstrapServer' not allowed"),
        ("missing-secret.yaml", "at '/kafka/sasl/existingSecret': minLength: got 0, want 1"),
        ("registry-secret-in-config.yaml", "invalid propertyName 'basic.auth.user.info'"),
    ],
)
def test_helm_lint_strict_fails_on_bad_values_with_the_schemas_message(
    k8s_tools: K8sTools, values: str, message: str
) -> None:
    result = helm_run(k8s_tools, "lint", "--strict", str(CHART), values=BAD_VALUES / values)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stdout + result.stderr
    assert message in result.stdout + result.stderr



def test_the_registry_settings_of_config_reach_the_service_and_its_password_a_file(
    k8s_tools: K8sTools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``config.schema_registry`` (Confluent's names, docs/deployment.md) is written into the
    config file's ConfigMap and read by the service as ``schema_registry``; the password is a
    Secret's file (``secretFiles``), never a value of the chart. The schema admits exactly
    the settings the service reads but the secret ones."""
    from app.config import _REGISTRY_SECRETS, REGISTRY_SETTINGS, load_settings

    schema = json.loads((CHART / "values.schema.json").read_text())
    mapping = schema["properties"]["config"]["patternProperties"]["^schema_registry$"]
    assert mapping["propertyNames"]["enum"] == [
        n for n in REGISTRY_SETTINGS if n not in _REGISTRY_SECRETS]
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({
        "config": {"schema_registry": {
            "schema.registry.url": "https://registry.internal:8081",
            "schema.registry.ssl.ca.location": "/etc/tidemark/secrets/registry-ca/ca.crt",
            "auto.register.schemas": False,
            "use.latest.version": True,
            "value.subject.name.strategy": "TopicRecordNameStrategy",
        }},
        "secretFiles": [{"name": "registry", "existingSecret": "tidemark-registry",
                         "key": "password", "env": "TIDEMARK_SCHEMA_REGISTRY_PASSWORD_FILE"}],
        "extraEnv": [{"name": "TIDEMARK_SCHEMA_REGISTRY_USERNAME", "valueFrom": {
            "secretKeyRef": {"name": "tidemark-registry", "key": "username"}}}],
    }))
    assert helm_run(k8s_tools, "lint", "--strict", str(CHART), values=values).returncode == 0
    docs = manifests(render(k8s_tools, values))
    config = one(docs, "ConfigMap", "-config")["data"]["tidemark.yaml"]
    assert "hunter2" not in json.dumps(docs)
    driver = one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in driver["env"]}
    mounted = env["TIDEMARK_SCHEMA_REGISTRY_PASSWORD_FILE"]["value"]
    assert mounted.startswith("/etc/tidemark/secrets/registry/")
    # The pod's files and environment, here: the config file and the Secret's password file.
    (tmp_path / "tidemark.yaml").write_text(config)
    (tmp_path / "password").write_text("hunter2\n")
    monkeypatch.setenv("TIDEMARK_CONFIG", str(tmp_path / "tidemark.yaml"))
    monkeypatch.setenv("TIDEMARK_SCHEMA_REGISTRY_PASSWORD_FILE", str(tmp_path / "password"))
    monkeypatch.setenv("TIDEMARK_SCHEMA_REGISTRY_USERNAME", "tidemark")
    settings = load_settings(bootstrap_servers="kafka:9092")
    assert settings.schema_registry_config() == {
        "url": "https://registry.internal:8081",
        "basic.auth.user.info": "tidemark:hunter2",
        "ssl.ca.location": "/etc/tidemark/secrets/registry-ca/ca.crt",
    }
    assert settings.schema_registry["auto.register.schemas"] == "false"
    assert settings.schema_registry["use.latest.version"] == "true"
    assert settings.schema_registry["value.subject.name.strategy"] == "TopicRecordNameStrategy"

def _closed_objects(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = []
    if "properties" in schema:
        found.append((path, schema))
        for key, sub in schema["properties"].items():
            found += _closed_objects(sub, f"{path}.{key}".lstrip("."))
    return found


def test_the_schema_closes_every_object_the_chart_defines_and_knows_every_default() -> None:
    """An object of ours (one the schema lists properties of) admits no other key, and every
    key of values.yaml is in the schema, so the defaults themselves pass."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for path, node in _closed_objects(schema):
        assert node.get("additionalProperties") is False, path
        default = values
        for key in filter(None, path.split(".")):
            default = default.get(key, {}) if isinstance(default, dict) else {}
        if isinstance(default, dict):
            assert set(default) <= set(node["properties"]), (path, set(default))


def _hook(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (pod,) = [d for d in docs if d["kind"] == "Pod"
              and d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    return pod


def test_helm_test_pod_reaches_the_metrics_port_through_the_network_policy(
    k8s_tools: K8sTools,
) -> None:
    docs = manifests(render(k8s_tools, None))
    pod = _hook(docs)
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["TIDEMARK_URL"] == "http://tm-tidemark-metrics.streaming.svc:9108"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    labels = pod["metadata"]["labels"]
    spec = one(docs, "NetworkPolicy", "tidemark")["spec"]
    # Not one of the release's Spark pods (whose egress the policy narrows), and admitted on
    # the metrics port beside Prometheus' namespace.
    assert not spec["podSelector"]["matchLabels"].items() <= labels.items()
    metrics = next(r for r in spec["ingress"] if "ports" in r)
    assert any(peer.get("podSelector", {}).get("matchLabels", {}).items() <= labels.items()
               for peer in metrics["from"])
    headless = manifests(render(k8s_tools, None, "metrics.service.enabled=false"))
    assert {e["name"]: e["value"] for e in _hook(headless)["spec"]["containers"][0]["env"]}[
        "TIDEMARK_URL"] == "http://tm-tidemark-driver.streaming.svc:9108"


def _run_hook(pod: dict[str, Any], url: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The hook pod's command and environment, run here against ``url``."""
    (container,) = pod["spec"]["containers"]
    command = container["command"]
    assert command[0] == "python"
    variables = {e["name"]: e["value"] for e in container["env"]}
    variables.update(TIDEMARK_URL=url, TIDEMARK_WAIT_SECONDS="0", **env)
    return subprocess.run([PYTHON, *command[1:]], env={**os.environ, **variables},
                          capture_output=True, text=True, timeout=60)


def test_helm_test_command_checks_readyz_and_a_metric_of_tidemarks_server(
    k8s_tools: K8sTools,
) -> None:
    """The hook's own command against Tidemark's metrics server (app/observability/server.py,
    the one `tidemark run` serves): it passes only while /readyz is 200 and the metric has a
    sample."""
    pod = _hook(manifests(render(k8s_tools, None)))
    metrics = TidemarkMetrics()
    metrics.set_build_info("0.1.0", "purchases.sql")
    state = {"ready": (False, "streaming query not running")}
    with MetricsServer(metrics.registry, lambda: state["ready"], port=0,
                       host="127.0.0.1") as server:
        url = f"http://127.0.0.1:{server.port}"
        unready = _run_hook(pod, url)
        state["ready"] = (True, "broker reachable")
        passed = _run_hook(pod, url)
        missing = _run_hook(pod, url, TIDEMARK_METRIC="tidemark_nothing_total")
    gone = _run_hook(pod, url)
    assert unready.returncode == 1
    assert unready.stderr.strip() == f"FAIL {url}/readyz: 503: streaming query not running"
    assert passed.returncode == 0, passed.stderr
    assert passed.stdout.strip() == (
        f'OK {url}: ready (broker reachable); '
        'tidemark_build_info{program="purchases.sql",version="0.1.0"} 1.0'
    )
    assert missing.returncode == 1
    assert "no sample of tidemark_nothing_total" in missing.stderr
    assert gone.returncode == 1 and "no answer" in gone.stderr


@pytest.mark.parametrize("values", [None, KUBERNETES], ids=["local", "kubernetes"])
def test_disruption_budgets_cover_the_driver_and_the_executors(
    k8s_tools: K8sTools, values: Path | None
) -> None:
    docs = manifests(render(k8s_tools, values))
    driver = one(docs, "PodDisruptionBudget", "-driver")["spec"]
    assert driver["maxUnavailable"] == 1
    pod_labels = one(docs, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert driver["selector"]["matchLabels"].items() <= pod_labels.items()
    executors = [d for d in docs if d["kind"] == "PodDisruptionBudget"
                 and d["metadata"]["name"].endswith("-executors")]
    if values is None:
        assert not executors
        return
    template = yaml.safe_load(
        one(docs, "ConfigMap", "-spark")["data"]["executor-pod-template.yaml"])
    selector = executors[0]["spec"]["selector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()
    assert not selector.items() <= pod_labels.items()
    off = manifests(render(k8s_tools, values, "podDisruptionBudget.enabled=false"))
    assert not [d for d in off if d["kind"] == "PodDisruptionBudget"]


def test_pod_monitor_scrapes_the_driver_with_the_service_monitors_labels(
    k8s_tools: K8sTools,
) -> None:
    docs = manifests(render(k8s_tools, None, "metrics.podMonitor.enabled=true"))
    monitor = one(docs, "PodMonitor")["spec"]
    pod = one(docs, "StatefulSet")["spec"]["template"]
    assert monitor["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (endpoint,) = monitor["podMetricsEndpoints"]
    assert endpoint["port"] in {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
    assert monitor["namespaceSelector"] == {"matchNames": ["streaming"]}
    service = one(manifests(render(k8s_tools, None, "metrics.serviceMonitor.enabled=true")),
                  "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["relabelings"] == service["relabelings"] == [
        {"action": "replace", "targetLabel": "job", "replacement": "tm-tidemark"},
        {"action": "replace", "targetLabel": "release", "replacement": "tm"},
    ]


def _dashboard(docs: list[dict[str, Any]]) -> dict[str, Any]:
    data = one(docs, "ConfigMap", "-dashboard")["data"]
    dashboard: dict[str, Any] = json.loads(data["tidemark-dashboard.json"])
    return dashboard


@pytest.mark.parametrize(
    ("release", "namespace"),
    [("tm", "streaming"), ("r" * 53, "n" * 63)],
    ids=["short", "longest-names"],
)
def test_dashboard_uid_is_per_release_and_within_grafanas_limit(
    k8s_tools: K8sTools, release: str, namespace: str
) -> None:
    dashboard = _dashboard(manifests(render(k8s_tools, None, release=release,
                                            namespace=namespace)))
    assert len(dashboard["uid"]) <= 40
    assert re.fullmatch(r"[a-z0-9-]+", dashboard["uid"])
    other = _dashboard(manifests(render(k8s_tools, None, release=release[:-1] + "s",
                                        namespace=namespace)))
    assert other["uid"] != dashboard["uid"]  # differs even where the readable part is cut


SELECTOR = re.compile(r"\b(tidemark_[a-z0-9_]*[a-z0-9])\{([^}]*)\}")


def _alert_rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups = one(docs, "PrometheusRule")["spec"]["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_two_releases_in_one_namespace_share_no_name_uid_or_alert(
    k8s_tools: K8sTools, tmp_path: Path
) -> None:
    releases = {name: manifests(render(k8s_tools, KUBERNETES, *MONITORING, release=name))
                for name in ("orders", "payments")}
    names = {release: {(d["kind"], d["metadata"]["name"]) for d in docs}
             for release, docs in releases.items()}
    assert not names["orders"] & names["payments"]
    for release, docs in releases.items():
        spark = one(docs, "ConfigMap", "-spark")["data"]["spark-defaults.conf"]
        assert f"spark.kubernetes.executor.podNamePrefix       {release}-tidemark-exec" in spark
    uids = {_dashboard(docs)["uid"] for docs in releases.values()}
    titles = {_dashboard(docs)["title"] for docs in releases.values()}
    assert len(uids) == len(titles) == 2
    # Every selector of every alert names its own release's namespace and job, and every
    # aggregation keeps them, so an alert's labels say which release it is about.
    for release, docs in releases.items():
        own = f'namespace="streaming", job="{release}-tidemark"'
        for rule in _alert_rules(docs):
            selectors = SELECTOR.findall(rule["expr"])
            assert selectors and all(m.startswith(own) for _, m in selectors), rule["alert"]
            for grouping in re.findall(r"\b(?:by|on) \(([^)]*)\)", rule["expr"]):
                assert {"namespace", "job"} <= {g.strip() for g in grouping.split(",")}
    # And evaluated: the payments query is down and orders' metrics are absent; each release's
    # rules fire only for their own release, once.
    files = []
    for release, docs in releases.items():
        path = tmp_path / f"{release}.yaml"
        groups = one(docs, "PrometheusRule")["spec"]["groups"]
        path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
        files.append(path.name)
    rules = {r["alert"]: r for r in _alert_rules(releases["payments"])}

    def expected(alert: str, **labels: str) -> dict[str, Any]:
        annotations = {
            key: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)
            for key, text in rules[alert]["annotations"].items()
        }
        return {"exp_labels": {**rules[alert]["labels"], "namespace": "streaming", **labels},
                "exp_annotations": annotations}

    scenario = {
        "rule_files": files,
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": 'tidemark_query_up{namespace="streaming",job="payments-tidemark",'
                           'query="purchase"}', "values": "0x10"},
                {"series": 'tidemark_build_info{namespace="streaming",job="payments-tidemark",'
                           'version="0.1.0",program="p.sql"}', "values": "1x10"},
            ],
            "alert_rule_test": [
                {"eval_time": "5m", "alertname": "TidemarkQueryDown", "exp_alerts": [
                    expected("TidemarkQueryDown", job="payments-tidemark", query="purchase")]},
                {"eval_time": "10m", "alertname": "TidemarkAbsent", "exp_alerts": [
                    expected("TidemarkAbsent", job="orders-tidemark")]},
            ],
        }],
    }
    (tmp_path / "two-releases.yml").write_text(yaml.safe_dump(scenario, sort_keys=False))
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: run scripts/install-prometheus.sh"
    result = subprocess.run([promtool, "test", "rules", "two-releases.yml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
