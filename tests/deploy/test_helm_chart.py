"""The Helm chart renders, lints and validates against Kubernetes' schemas.

Every values file (the defaults, ci/local-values.yaml, ci/kubernetes-values.yaml) goes through
``helm lint --strict``, ``helm template`` and ``kubeconform -strict`` against the Kubernetes
schemas generated offline by scripts/install-k8s-tools.sh. kubeconform has no schema for the
prometheus-operator CRDs, so those two kinds are skipped there and checked structurally here,
together with the promises the chart makes: one driver per checkpoint, probes on the health
endpoints, graceful shutdown, secrets only by reference.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_support import CHART, KUBERNETES_VERSION, ROOT, K8sTools

VALUES = {
    "default": None,
    "local": CHART / "ci" / "local-values.yaml",
    "kubernetes": CHART / "ci" / "kubernetes-values.yaml",
}
CRDS = ("ServiceMonitor", "PrometheusRule")


def _helm(
    tools: K8sTools, *args: str, values: Path | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [str(tools.helm), *args, "--kube-version", KUBERNETES_VERSION]
    if values is not None:
        cmd += ["-f", str(values)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)


def _render(tools: K8sTools, values: Path | None, *sets: str) -> str:
    args = ["template", "tm", str(CHART), "--namespace", "streaming"]
    for assignment in sets:
        args += ["--set", assignment]
    result = _helm(tools, *args, values=values)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _docs(rendered: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def _one(docs: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    names = [d["metadata"]["name"] for d in found]
    assert len(found) == 1, f"expected one {kind}*{suffix}, got {names}"
    return found[0]


def _kubeconform(tools: K8sTools, manifests: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(tools.kubeconform), "-strict", "-summary", "-output", "text",
            "-kubernetes-version", KUBERNETES_VERSION,
            "-schema-location", tools.schema_location, *extra, "-",
        ],
        input=manifests, capture_output=True, text=True, timeout=120,
    )


@pytest.fixture(scope="module", params=list(VALUES))
def rendered(request: pytest.FixtureRequest, k8s_tools: K8sTools) -> tuple[str, str]:
    return request.param, _render(k8s_tools, VALUES[request.param])


@pytest.mark.parametrize("mode", list(VALUES))
def test_helm_lint_passes_for_every_values_file(k8s_tools: K8sTools, mode: str) -> None:
    result = _helm(k8s_tools, "lint", "--strict", str(CHART), values=VALUES[mode])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_kubeconform_validates_rendered_manifests(
    k8s_tools: K8sTools, rendered: tuple[str, str]
) -> None:
    mode, manifests = rendered
    result = _kubeconform(k8s_tools, manifests, "-skip", ",".join(CRDS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Invalid: 0, Errors: 0" in result.stdout
    kinds = {d["kind"] for d in _docs(manifests)}
    assert {"StatefulSet", "Service", "ConfigMap", "ServiceAccount"} <= kinds, mode


def test_kubeconform_rejects_a_broken_manifest(k8s_tools: K8sTools) -> None:
    """The offline schemas really validate: an unknown container field must fail."""
    manifests = _render(k8s_tools, None)
    docs = _docs(manifests)
    _one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]["imagePullPolice"] = "x"
    result = _kubeconform(k8s_tools, yaml.safe_dump_all(docs))
    assert result.returncode != 0
    assert "imagePullPolice" in result.stdout


def test_executor_pod_template_is_a_valid_pod(k8s_tools: K8sTools) -> None:
    docs = _docs(_render(k8s_tools, VALUES["kubernetes"]))
    template = _one(docs, "ConfigMap", "-spark")["data"]["executor-pod-template.yaml"]
    result = _kubeconform(k8s_tools, template)
    assert result.returncode == 0, result.stdout + result.stderr
    pod = yaml.safe_load(template)
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    # Executors read Kafka too: same servers, same TLS files, the key password by reference.
    assert env["TIDEMARK_BOOTSTRAP_SERVERS"]["value"] == "kafka-bootstrap.kafka.svc:9093"
    assert env["TIDEMARK_KAFKA_SSL_KEY_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "tidemark-kafka-tls", "key": "user.password",
    }
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
              if "persistentVolumeClaim" in v]
    assert claims == ["checkpoint-tm-tidemark-0"]  # the driver's claim: one shared checkpoint
    assert env["TIDEMARK_CHECKPOINT"]["value"] == "/var/lib/tidemark/checkpoint/v1"


def test_s15_one_driver_per_checkpoint_with_probes_and_graceful_shutdown(
    k8s_tools: K8sTools, rendered: tuple[str, str]
) -> None:
    """A single-replica StatefulSet, probes on /healthz and /readyz, time to end the step."""
    mode, manifests = rendered
    docs = _docs(manifests)
    sts = _one(docs, "StatefulSet")
    assert sts["spec"]["replicas"] == 1
    pod = sts["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] >= 60
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TIDEMARK_METRICS_PORT"] == str(ports["metrics"])
    assert env["TIDEMARK_CHECKPOINT"] == "/var/lib/tidemark/checkpoint/v1"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/tmp", "/var/lib/tidemark", "/var/lib/tidemark/checkpoint"} <= mounts
    if mode == "kubernetes":
        assert env["TIDEMARK_SPARK_MASTER"] == "k8s://https://kubernetes.default.svc:443"
        assert {"spark-driver", "spark-blockmgr"} <= set(ports)
    else:
        assert env["TIDEMARK_SPARK_MASTER"].startswith("local[")


def test_secrets_only_by_reference(k8s_tools: K8sTools) -> None:
    docs = _docs(_render(k8s_tools, VALUES["local"]))
    container = _one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["TIDEMARK_KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "tidemark-kafka-user", "key": "password",
    }
    assert "value" not in env["TIDEMARK_KAFKA_SASL_USERNAME"]
    assert env["TIDEMARK_KAFKA_SSL_CA_LOCATION"]["value"] == "/etc/tidemark/kafka-tls/ca.crt"
    assert not [d for d in docs if d["kind"] == "Secret"]


def test_kubernetes_mode_rbac_and_spark_conf(k8s_tools: K8sTools) -> None:
    docs = _docs(_render(k8s_tools, VALUES["kubernetes"]))
    role = _one(docs, "Role")
    pod_rule = next(r for r in role["rules"] if "pods" in r["resources"])
    assert {"create", "delete", "watch"} <= set(pod_rule["verbs"])
    binding = _one(docs, "RoleBinding")
    sa = _one(docs, "ServiceAccount")
    assert binding["subjects"][0]["name"] == sa["metadata"]["name"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    conf = dict(
        line.split(None, 1)
        for line in _one(docs, "ConfigMap", "-spark")["data"]["spark-defaults.conf"].splitlines()
        if line.strip()
    )
    headless = _one(docs, "Service", "-driver")
    assert headless["spec"]["clusterIP"] == "None"
    assert conf["spark.driver.host"] == f"{headless['metadata']['name']}.streaming.svc"
    sts = _one(docs, "StatefulSet")
    assert sts["spec"]["serviceName"] == headless["metadata"]["name"]
    assert conf["spark.kubernetes.driver.pod.name"] == sts["metadata"]["name"] + "-0"
    assert conf["spark.kubernetes.container.image"] == "registry.example.com/tidemark:0.1.0"
    assert conf["spark.executor.instances"] == "3"
    assert conf["spark.kubernetes.namespace"] == "streaming"
    assert conf["spark.sql.shuffle.partitions"] == "12"
    # Executor pods must be able to reach the driver's fixed ports through the service.
    service_ports = {p["port"] for p in headless["spec"]["ports"]}
    driver_ports = {int(conf["spark.driver.port"]), int(conf["spark.driver.blockManager.port"])}
    assert driver_ports <= service_ports


def test_local_mode_has_no_api_access(k8s_tools: K8sTools) -> None:
    docs = _docs(_render(k8s_tools, None))
    assert not [d for d in docs if d["kind"] in ("Role", "RoleBinding")]
    pod = _one(docs, "StatefulSet")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False


def test_part_m_monitoring_objects_ship_the_observability_files(k8s_tools: K8sTools) -> None:
    """ServiceMonitor scrapes the metrics Service; rules and dashboard come from files/."""
    docs = _docs(_render(k8s_tools, VALUES["local"]))
    service = _one(docs, "Service", "-metrics")
    monitor = _one(docs, "ServiceMonitor")
    labels = service["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    assert "metrics" in port_names
    assert monitor["metadata"]["labels"]["release"] == "prometheus"

    rules_files = sorted((CHART / "files" / "prometheus").glob("*.yaml"))
    expected_groups = [g for f in rules_files for g in yaml.safe_load(f.read_text())["groups"]]
    if expected_groups:
        rule = _one(docs, "PrometheusRule")
        assert rule["spec"]["groups"] == expected_groups
        for group in rule["spec"]["groups"]:
            assert group["name"] and group["rules"]
            for r in group["rules"]:
                assert r["expr"] and ("alert" in r or "record" in r)

    dashboards = sorted((CHART / "files" / "grafana").glob("*.json"))
    if dashboards:
        cm = _one(docs, "ConfigMap", "-dashboard")
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        for path in dashboards:
            assert json.loads(cm["data"][path.name]) == json.loads(path.read_text())


def test_s15_checkpoint_without_persistence_is_scratch_in_local_mode(k8s_tools: K8sTools) -> None:
    """persistence.enabled=false: no claim; the checkpoint sits in the pod's work emptyDir."""
    docs = _docs(_render(k8s_tools, None, "checkpoint.persistence.enabled=false"))
    sts = _one(docs, "StatefulSet")
    assert "volumeClaimTemplates" not in sts["spec"]
    container = sts["spec"]["template"]["spec"]["containers"][0]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts["/var/lib/tidemark"] == "work"
    assert "/var/lib/tidemark/checkpoint" not in mounts
    result = _helm(k8s_tools, "template", "tm", str(CHART), "--set", "spark.mode=kubernetes",
                   "--set", "checkpoint.persistence.enabled=false")
    assert result.returncode != 0 and "shared volume" in result.stderr


def test_default_values_leave_crds_off(k8s_tools: K8sTools) -> None:
    kinds = [d["kind"] for d in _docs(_render(k8s_tools, None))]
    assert not set(CRDS) & set(kinds)


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("spark.mode=yarn",), "spark.mode must be local or kubernetes"),
        (
            ("kafka.securityProtocol=SASL_SSL", "kafka.tls.existingSecret=ca"),
            "kafka.sasl.mechanism",
        ),
        (("kafka.securityProtocol=SSL",), "kafka.tls.existingSecret"),
        (("spark.mode=kubernetes",), "ReadWriteMany"),
        (("program.inline=",), "program.inline"),
        (("checkpoint.name=../other",), "checkpoint.name"),
    ],
)
def test_chart_refuses_inconsistent_values(
    k8s_tools: K8sTools, sets: tuple[str, ...], message: str
) -> None:
    args = ["template", "tm", str(CHART)]
    for assignment in sets:
        args += ["--set", assignment]
    result = _helm(k8s_tools, *args)
    assert result.returncode != 0
    assert message in result.stderr


def test_chart_env_names_are_settings(k8s_tools: K8sTools) -> None:
    """Every TIDEMARK_* variable the chart sets is a setting of app/config.py (no dead env)."""
    from app.config import KafkaSecurity, Settings

    known = {f"TIDEMARK_{name.upper()}" for name in Settings.model_fields} | {
        f"TIDEMARK_KAFKA_{name.upper()}" for name in KafkaSecurity.model_fields
    } | {"TIDEMARK_CONFIG"}
    for mode, values in VALUES.items():
        docs = _docs(_render(k8s_tools, values))
        container = _one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
        names = {e["name"] for e in container["env"] if e["name"].startswith("TIDEMARK_")}
        assert names <= known, (mode, names - known)


@pytest.mark.parametrize("mode", list(VALUES))
def test_notes_render(k8s_tools: K8sTools, mode: str, tmp_path: Path) -> None:
    """NOTES.txt renders (helm template skips it and `helm install` needs a cluster): a copy of
    the chart renders it through `tpl` into a ConfigMap, with the same values and context."""
    chart = tmp_path / "tidemark"
    shutil.copytree(CHART, chart)
    (chart / "notes-under-test.txt").write_text((CHART / "templates" / "NOTES.txt").read_text())
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n"
        '  notes: {{ tpl (.Files.Get "notes-under-test.txt") . | quote }}\n'
    )
    args = ["template", "tm", str(chart), "--namespace", "streaming",
            "--show-only", "templates/zz-notes.yaml"]
    result = _helm(k8s_tools, *args, values=VALUES[mode])
    assert result.returncode == 0, result.stderr
    notes = yaml.safe_load(result.stdout)["data"]["notes"]
    assert "kubectl -n streaming logs -f tm-tidemark-0" in notes
    assert "/var/lib/tidemark/checkpoint/v1" in notes
    if mode == "kubernetes":
        assert "3 executor pods named tm-tidemark-exec-*" in notes
