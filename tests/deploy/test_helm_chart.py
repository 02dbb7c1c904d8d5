"""The Helm chart renders, lints and validates against Kubernetes' schemas.

Every values file (the defaults, ci/local-values.yaml, ci/kubernetes-values.yaml) goes through
``helm lint --strict``, ``helm template`` and ``kubeconform -strict`` against the Kubernetes
schemas generated offline by scripts/install-k8s-tools.sh. kubeconform has no schema for the
prometheus-operator CRDs, so those two kinds are skipped there and checked structurally here,
together with the promises the chart makes: one driver per checkpoint, probes on the health
endpoints, graceful shutdown, secrets only by reference.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_support import CHART, KUBERNETES_VERSION, ROOT, K8sTools, tools_env
from deploy_support import helm_run as _helm
from deploy_support import manifests as _docs
from deploy_support import one as _one
from deploy_support import render as _render

VALUES = {
    "default": None,
    "local": CHART / "ci" / "local-values.yaml",
    "kubernetes": CHART / "ci" / "kubernetes-values.yaml",
}
CRDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")


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
    # Executors read Kafka too: same servers, same TLS files, the key password as a file.
    assert env["TIDEMARK_BOOTSTRAP_SERVERS"]["value"] == "kafka-bootstrap.kafka.svc:9093"
    assert env["TIDEMARK_KAFKA_SSL_KEY_PASSWORD_FILE"]["value"] == (
        "/etc/tidemark/kafka-tls/user.password"
    )
    assert "TIDEMARK_KAFKA_SSL_KEY_PASSWORD" not in env
    tls = next(v for v in pod["spec"]["volumes"] if v["name"] == "kafka-tls")
    assert tls["secret"]["secretName"] == "tidemark-kafka-tls"
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


def _secret_env(container: dict[str, Any]) -> list[str]:
    """The variables of ``container`` whose value comes from a Secret."""
    return [e["name"] for e in container.get("env", [])
            if "secretKeyRef" in e.get("valueFrom", {})]


def test_secrets_only_by_reference_and_passwords_as_files(k8s_tools: K8sTools) -> None:
    docs = _docs(_render(k8s_tools, VALUES["local"]))
    pod = _one(docs, "StatefulSet")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    # The password is a file of the mounted Secret, holding that one key; only the username
    # comes from the Secret through the environment.
    assert env["TIDEMARK_KAFKA_SASL_PASSWORD_FILE"]["value"] == (
        "/etc/tidemark/secrets/kafka-sasl/password"
    )
    assert _secret_env(container) == ["TIDEMARK_KAFKA_SASL_USERNAME"]
    assert not [name for name in env if name.endswith("_PASSWORD")]
    volume = next(v for v in pod["volumes"] if v["name"] == "kafka-sasl")
    assert volume["secret"] == {
        "secretName": "tidemark-kafka-user", "defaultMode": 0o440,
        "items": [{"key": "password", "path": "password"}],
    }
    mount = next(m for m in container["volumeMounts"] if m["name"] == "kafka-sasl")
    assert mount == {"name": "kafka-sasl", "mountPath": "/etc/tidemark/secrets/kafka-sasl",
                     "readOnly": True}
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

    # The rules of files/, each selector scoped to the release (test_helm_releases.py).
    rules_files = sorted((CHART / "files" / "prometheus").glob("*.yaml"))
    scoped = ('namespace=~".*", job=~".+"', 'namespace="streaming", job="tm-tidemark"')
    expected_groups = [g for f in rules_files
                       for g in yaml.safe_load(f.read_text().replace(*scoped))["groups"]]
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
            rendered = json.loads(cm["data"][path.name])
            shipped = json.loads(path.read_text())
            assert rendered["panels"] == shipped["panels"]
            assert rendered["title"] == f"{shipped['title']} (streaming/tm)"
            variables = {v["name"]: v for v in rendered["templating"]["list"]}
            for name, value in {"namespace": "streaming", "release": "tm",
                                "job": "tm-tidemark"}.items():
                assert variables[name]["current"]["value"] == [value]


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


S3_CHECKPOINT = (
    "checkpoint.url=s3a://tidemark-ck/purchases", "checkpoint.s3.endpoint=http://minio.store:9000",
    "checkpoint.s3.region=eu-west-1", "checkpoint.s3.pathStyle=true",
    "checkpoint.s3.jars=/opt/hadoop-aws", "checkpoint.s3.credentials.existingSecret=tidemark-s3",
)


def _object_store_env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container["env"]
            if e["name"].startswith(("TIDEMARK_S3_", "AWS_"))}


def test_checkpoint_at_an_s3a_url_sets_what_the_app_reads_and_claims_no_volume(
    k8s_tools: K8sTools, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kubernetes mode with checkpoint.url: the driver and the executors get the URL and the
    store's settings, the access key by reference to the Secret; no volume is claimed or
    mounted, so no ReadWriteMany volume is needed; the pods may reach the store's port."""
    from app.config import ObjectStore

    docs = _docs(_render(k8s_tools, VALUES["kubernetes"], *S3_CHECKPOINT))
    sts = _one(docs, "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    driver = pod["containers"][0]
    executor = _executor_pod(docs)
    assert "volumeClaimTemplates" not in sts["spec"]
    assert "persistentVolumeClaimRetentionPolicy" not in sts["spec"]
    for spec in (pod, executor["spec"]):
        assert not [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
        (container,) = spec["containers"]
        assert "/var/lib/tidemark/checkpoint" not in {
            m["mountPath"] for m in container["volumeMounts"]}
        env = {e["name"]: e for e in container["env"]}
        assert env["TIDEMARK_CHECKPOINT"]["value"] == "s3a://tidemark-ck/purchases/v1"
        store = _object_store_env(container)
        assert store == _object_store_env(driver), "executors get the driver's settings"
        for name, key in (("AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID"),
                          ("AWS_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY")):
            assert store[name] == {"name": name, "valueFrom": {"secretKeyRef": {
                "name": "tidemark-s3", "key": key}}}
    # What the app reads of them: the ObjectStore settings group (TIDEMARK_S3_*).
    plain = {n: e["value"] for n, e in _object_store_env(driver).items() if "value" in e}
    for name in list(os.environ):
        if name.startswith("TIDEMARK_S3_"):
            monkeypatch.delenv(name)
    for name, value in plain.items():
        monkeypatch.setenv(name, value)
    settings = ObjectStore()
    assert settings.endpoint == "http://minio.store:9000"
    assert settings.region == "eu-west-1"
    assert settings.path_style is True
    assert settings.jars == Path("/opt/hadoop-aws")
    assert settings.access_key_id is None, "the key comes as AWS_*, which the clients read"
    assert settings.lease_seconds == 30
    # The driver that replaces a killed one waits out its lease rather than crash-looping.
    driver_env = {e["name"]: e.get("value") for e in driver["env"]}
    assert driver_env["TIDEMARK_CHECKPOINT_LOCK_WAIT_SECONDS"] == "60"
    assert "TIDEMARK_CHECKPOINT_LOCK_WAIT_SECONDS" not in {
        e["name"] for e in executor["spec"]["containers"][0]["env"]}
    egress = _one(docs, "NetworkPolicy", "-tidemark")["spec"]["egress"]
    assert {"ports": [{"port": 9000, "protocol": "TCP"}]} in egress
    result = _kubeconform(k8s_tools, yaml.safe_dump_all(docs), "-skip", ",".join(CRDS))
    assert result.returncode == 0, result.stdout + result.stderr
    template = _kubeconform(k8s_tools, yaml.safe_dump(executor))
    assert template.returncode == 0, template.stdout + template.stderr


def test_checkpoint_at_an_s3a_url_without_a_secret_sets_no_credentials(
    k8s_tools: K8sTools,
) -> None:
    """No credentials Secret (an instance role, IRSA): no AWS_* variable; the store's settings
    still reach the driver; Spark's log file, when asked for, goes to the work volume (a URL
    cannot be appended to); AWS S3's port when there is no endpoint. Driver and executors
    run as the release's service account, whose IRSA annotation gives both the role (the
    executors without a Kubernetes API token)."""
    docs = _docs(_render(k8s_tools, VALUES["kubernetes"], "checkpoint.url=s3a://tidemark-ck",
                         "settings.sparkLog=file", "serviceAccount.annotations.eks\\.amazonaws"
                         "\\.com/role-arn=arn:aws:iam::123456789012:role/tidemark"))
    account = _one(docs, "ServiceAccount")
    assert account["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/tidemark"}
    executor = _executor_pod(docs)["spec"]
    assert executor["serviceAccountName"] == account["metadata"]["name"]
    assert executor["automountServiceAccountToken"] is False
    assert _one(docs, "StatefulSet")["spec"]["template"]["spec"]["serviceAccountName"] == (
        account["metadata"]["name"])
    sts = _one(docs, "StatefulSet")
    assert "volumeClaimTemplates" not in sts["spec"]
    container = sts["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TIDEMARK_CHECKPOINT"] == "s3a://tidemark-ck/v1"
    assert env["TIDEMARK_SPARK_LOG_FILE"] == "/var/lib/tidemark/spark.log"
    assert _object_store_env(container) == {
        "TIDEMARK_S3_PATH_STYLE": {"name": "TIDEMARK_S3_PATH_STYLE", "value": "false"},
        "TIDEMARK_S3_LEASE_SECONDS": {"name": "TIDEMARK_S3_LEASE_SECONDS", "value": "30"}}
    assert env["TIDEMARK_CHECKPOINT_LOCK_WAIT_SECONDS"] == "60"
    egress = _one(docs, "NetworkPolicy", "-tidemark")["spec"]["egress"]
    assert {"ports": [{"port": 443, "protocol": "TCP"}]} in egress


def test_default_values_leave_crds_off(k8s_tools: K8sTools) -> None:
    kinds = [d["kind"] for d in _docs(_render(k8s_tools, None))]
    assert not set(CRDS) & set(kinds)


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("spark.mode=yarn",), "at '/spark/mode': value must be one of 'local', 'kubernetes'"),
        (
            ("kafka.securityProtocol=SASL_SSL", "kafka.tls.existingSecret=ca"),
            "at '/kafka/sasl/existingSecret': minLength",
        ),
        (
            ("kafka.securityProtocol=SASL_SSL", "kafka.sasl.mechanism=OAUTHBEARER",
             "kafka.sasl.existingSecret=oidc"),
            "at '/kafka/sasl/oauthbearer/tokenEndpointUrl': minLength",
        ),
        (("kafka.client.sasl\\.password=x",), "kafka.client sasl.password looks like a secret"),
        (("secretFiles[0].name=r", "secretFiles[0].existingSecret=s", "secretFiles[0].key=k",
          "secretFiles[0].env=REGISTRY_PASSWORD"),
         "at '/secretFiles/0/env': 'REGISTRY_PASSWORD' does not match pattern"),
        (("spark.mode=kubernetes",), "ReadWriteMany"),
        (("program.inline=",), "program.inline"),
        (("checkpoint.name=../other",), "at '/checkpoint/name'"),
        (("metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true"),
         "would both scrape the driver"),
        (("checkpoint.url=s3a://tidemark-ck", "checkpoint.s3.pathStyle=yes"),
         "at '/checkpoint/s3/pathStyle': got string, want boolean"),
        (("checkpoint.url=/var/lib/other",), "at '/checkpoint/url': '/var/lib/other' does not"),
        (("checkpoint.s3.endpoint=minio:9000",), "at '/checkpoint/s3/endpoint'"),
        (("checkpoint.s3.leaseSeconds=0",), "at '/checkpoint/s3/leaseSeconds'"),
        (("checkpoint.s3.accessKey=AKIA",),
         "at '/checkpoint/s3': additional properties 'accessKey' not allowed"),
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
    assert "metrics port from namespace monitoring" in notes
    if mode == "kubernetes":
        assert "3 executor pods named tm-tidemark-exec-*" in notes


def _spark_conf(docs: list[dict[str, Any]]) -> dict[str, str]:
    text = _one(docs, "ConfigMap", "-spark")["data"]["spark-defaults.conf"]
    return dict(
        line.split(None, 1) for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )


def _executor_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = yaml.safe_load(
        _one(docs, "ConfigMap", "-spark")["data"]["executor-pod-template.yaml"]
    )
    return pod


@pytest.mark.parametrize("mode", list(VALUES))
def test_spark_rpc_authentication_and_encryption_are_on_by_default(
    k8s_tools: K8sTools, mode: str
) -> None:
    docs = _docs(_render(k8s_tools, VALUES[mode]))
    conf = _spark_conf(docs)
    assert conf["spark.authenticate"] == "true"
    assert conf["spark.network.crypto.enabled"] == "true"
    assert conf["spark.network.crypto.saslFallback"] == "false"
    if mode != "kubernetes":
        # Local mode: Spark makes its own secret per run; no Secret object, no file.
        assert "spark.authenticate.secret.file" not in conf
        assert not [d for d in docs if d["kind"] == "Secret"]
        return
    # Kubernetes mode: one secret, generated by the chart, a file in driver and executors.
    path = conf["spark.authenticate.secret.file"]
    assert path == "/etc/tidemark/secrets/spark-auth/secret"
    secret = _one(docs, "Secret", "-spark-auth")
    generated = base64.b64decode(secret["data"]["secret"]).decode()
    assert len(generated) == 64 and generated.isalnum()
    driver = _one(docs, "StatefulSet")["spec"]["template"]["spec"]
    executor = _executor_pod(docs)["spec"]
    for pod in (driver, executor):
        (container,) = pod["containers"]
        volume = next(v for v in pod["volumes"] if v["name"] == "spark-auth")
        assert volume["secret"]["secretName"] == secret["metadata"]["name"]
        assert volume["secret"]["items"] == [{"key": "secret", "path": "secret"}]
        mount = next(m for m in container["volumeMounts"] if m["name"] == "spark-auth")
        assert f"{mount['mountPath']}/secret" == path and mount["readOnly"] is True
        assert not [e for e in container["env"] if "SECRET" in e["name"]]


def test_spark_auth_from_an_existing_secret_or_off(k8s_tools: K8sTools) -> None:
    docs = _docs(_render(k8s_tools, VALUES["kubernetes"], "spark.auth.existingSecret=spark-rpc",
                         "spark.auth.secretKey=key"))
    assert not [d for d in docs if d["kind"] == "Secret"]
    assert _spark_conf(docs)["spark.authenticate.secret.file"] == (
        "/etc/tidemark/secrets/spark-auth/key"
    )
    volume = next(v for v in _executor_pod(docs)["spec"]["volumes"] if v["name"] == "spark-auth")
    assert volume["secret"]["secretName"] == "spark-rpc"

    docs = _docs(_render(k8s_tools, VALUES["kubernetes"], "spark.auth.enabled=false"))
    assert not {"spark.authenticate", "spark.network.crypto.enabled"} & set(_spark_conf(docs))
    assert not [d for d in docs if d["kind"] == "Secret"]


def _ports(rule: dict[str, Any]) -> set[tuple[int, str]]:
    return {(p["port"], p["protocol"]) for p in rule.get("ports", [])}


@pytest.mark.parametrize("mode", list(VALUES))
def test_network_policy_by_default(k8s_tools: K8sTools, mode: str) -> None:
    docs = _docs(_render(k8s_tools, VALUES[mode]))
    policy = _one(docs, "NetworkPolicy", "tidemark")
    spec = policy["spec"]
    selector = spec["podSelector"]["matchLabels"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    driver = _one(docs, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= driver.items()
    # Metrics from the monitoring namespace, on the metrics port only.
    metrics = next(r for r in spec["ingress"] if "ports" in r)
    assert _ports(metrics) == {(9108, "TCP")}
    assert metrics["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
        # The release's `helm test` pod (test_helm_releases.py).
        {"podSelector": {"matchLabels": {"app.kubernetes.io/instance": "tm",
                                         "app.kubernetes.io/component": "test"}}},
    ]
    egress_ports = set().union(*(_ports(r) for r in spec["egress"]))
    assert {(53, "UDP"), (53, "TCP")} <= egress_ports
    kafka_port = {"default": 9092, "local": 9093, "kubernetes": 9093}[mode]
    assert (kafka_port, "TCP") in egress_ports
    if mode == "kubernetes":
        # Executors are selected too, and driver and executors reach each other on any port.
        executor = _executor_pod(docs)["metadata"]["labels"]
        assert selector.items() <= executor.items()
        peers = {"podSelector": {"matchLabels": selector}}
        assert {"from": [peers]} in spec["ingress"]
        assert {"to": [peers]} in spec["egress"]
        api = _one(docs, "NetworkPolicy", "-driver-api")["spec"]
        assert api["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "driver"
        assert _ports(api["egress"][0]) == {(443, "TCP"), (6443, "TCP")}
    else:
        assert not [r for r in spec["ingress"] if "ports" not in r]
        assert not [d for d in docs if d["metadata"]["name"].endswith("-driver-api")]


def test_network_policy_values(k8s_tools: K8sTools) -> None:
    docs = _docs(_render(
        k8s_tools, None,
        "networkPolicy.metrics.namespace=observability",
        "networkPolicy.schemaRegistry.ports={8081}",
        "networkPolicy.kafka.to[0].ipBlock.cidr=10.20.0.0/16",
        "kafka.securityProtocol=SASL_SSL", "kafka.sasl.mechanism=OAUTHBEARER",
        "kafka.sasl.existingSecret=oidc",
        "kafka.sasl.oauthbearer.tokenEndpointUrl=https://idp.internal:8443/oauth2/token",
        "kafka.sasl.oauthbearer.clientId=tidemark",
    ))
    spec = _one(docs, "NetworkPolicy")["spec"]
    assert spec["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "observability"
    }
    egress = {frozenset(_ports(r)): r for r in spec["egress"]}
    assert egress[frozenset({(9092, "TCP")})]["to"] == [{"ipBlock": {"cidr": "10.20.0.0/16"}}]
    assert frozenset({(8081, "TCP")}) in egress
    assert frozenset({(8443, "TCP")}) in egress  # the token endpoint's port
    result = _kubeconform(k8s_tools, yaml.safe_dump_all(docs))
    assert result.returncode == 0, result.stdout + result.stderr
    assert not [d for d in _docs(_render(k8s_tools, None, "networkPolicy.enabled=false"))
                if d["kind"] == "NetworkPolicy"]
    anywhere = _one(_docs(_render(k8s_tools, None, "networkPolicy.metrics.namespace=")),
                    "NetworkPolicy")["spec"]["ingress"]
    assert anywhere == [{"ports": [{"port": 9108, "protocol": "TCP"}]}]


def test_the_documented_pod_identity_egress_reaches_the_agent_from_every_pod(
    k8s_tools: K8sTools, tmp_path: Path,
) -> None:
    """docs/deployment.md's extraEgress for the EKS Pod Identity agent (the chart's own rules
    open only the object store's port): in the one policy of driver and executors, and
    valid."""
    text = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    after = text[text.index("EKS Pod Identity serves as well"):]
    start = after.index("```yaml\n") + len("```yaml\n")
    snippet = after[start:after.index("```", start)]
    values = tmp_path / "pod-identity.yaml"
    values.write_text(snippet, encoding="utf-8")
    docs = _docs(_render(k8s_tools, values, "spark.mode=kubernetes",
                         "checkpoint.url=s3a://tidemark-ck"))
    policy = _one(docs, "NetworkPolicy", "-tidemark")
    assert policy["spec"]["podSelector"]["matchLabels"].get("app.kubernetes.io/component") is None
    assert {"to": [{"ipBlock": {"cidr": "169.254.170.23/32"}}],
            "ports": [{"port": 80, "protocol": "TCP"}]} in policy["spec"]["egress"]
    result = _kubeconform(k8s_tools, yaml.safe_dump(policy))
    assert result.returncode == 0, result.stdout + result.stderr


def _containers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = list(_one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"])
    if "executor-pod-template.yaml" in _one(docs, "ConfigMap", "-spark")["data"]:
        found += _executor_pod(docs)["spec"]["containers"]
    return found


OAUTH = (
    "kafka.securityProtocol=SASL_SSL", "kafka.sasl.mechanism=OAUTHBEARER",
    "kafka.sasl.existingSecret=tidemark-oidc",
    "kafka.sasl.oauthbearer.tokenEndpointUrl=https://idp.internal/oauth2/token",
    "kafka.sasl.oauthbearer.clientId=tidemark", "kafka.sasl.oauthbearer.scope=kafka",
)


@pytest.mark.parametrize(
    ("values", "sets"),
    [(VALUES["default"], ()), (VALUES["local"], ()), (VALUES["kubernetes"], ()),
     (VALUES["kubernetes"], OAUTH),
     (None, ("secretFiles[0].name=registry", "secretFiles[0].existingSecret=tidemark-registry",
             "secretFiles[0].key=password",
             "secretFiles[0].env=TIDEMARK_SCHEMA_REGISTRY_PASSWORD_FILE"))],
    ids=["default", "local", "kubernetes", "oauthbearer", "secret-files"],
)
def test_no_password_in_the_environment(
    k8s_tools: K8sTools, values: Path | None, sets: tuple[str, ...]
) -> None:
    """Passwords and client secrets are files of mounted Secrets: no variable holds one, and
    each *_FILE variable names a file of a mounted Secret volume."""
    from app.config import KafkaSecurity, Settings

    settings = {f"TIDEMARK_{name.upper()}" for name in Settings.model_fields} | {
        f"TIDEMARK_KAFKA_{name.upper()}" for name in KafkaSecurity.model_fields
    }
    docs = _docs(_render(k8s_tools, values, *sets))
    for container in _containers(docs):
        env = {e["name"]: e for e in container["env"]}
        # Each *_FILE variable is a setting the app reads (a file nobody reads is no secret).
        assert {n for n in env if n.endswith("_FILE")} <= settings
        assert set(_secret_env(container)) <= {"TIDEMARK_KAFKA_SASL_USERNAME"}
        assert not [n for n in env if ("PASSWORD" in n or "SECRET" in n)
                    and not n.endswith("_FILE")]
        mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
        for name, variable in env.items():
            if name.endswith("_FILE"):
                assert any(variable["value"].startswith(f"{m}/") for m in mounts), name
    if sets:
        result = _kubeconform(k8s_tools, yaml.safe_dump_all(docs), "-skip", ",".join(CRDS))
        assert result.returncode == 0, result.stdout + result.stderr


def test_oauthbearer_renders_the_oidc_settings(k8s_tools: K8sTools) -> None:
    from app.config import KafkaSecurity

    docs = _docs(_render(k8s_tools, None, *OAUTH))
    container = _one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TIDEMARK_KAFKA_SASL_MECHANISM"] == "OAUTHBEARER"
    assert env["TIDEMARK_KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL"] == (
        "https://idp.internal/oauth2/token"
    )
    assert env["TIDEMARK_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE"] == (
        "/etc/tidemark/secrets/kafka-sasl/client-secret"
    )
    assert "TIDEMARK_KAFKA_SASL_USERNAME" not in env
    known = {f"TIDEMARK_KAFKA_{name.upper()}" for name in KafkaSecurity.model_fields}
    assert {n for n in env if n.startswith("TIDEMARK_KAFKA_")} <= known
    egress = _one(docs, "NetworkPolicy")["spec"]["egress"]
    assert {"ports": [{"port": 443, "protocol": "TCP"}]} in egress


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
def test_tls_without_a_ca_secret_uses_the_system_ca_bundle(
    k8s_tools: K8sTools, protocol: str
) -> None:
    sasl = ("kafka.sasl.mechanism=SCRAM-SHA-512", "kafka.sasl.existingSecret=tidemark-kafka-user")
    docs = _docs(_render(k8s_tools, None, f"kafka.securityProtocol={protocol}",
                         *(sasl if protocol == "SASL_SSL" else ())))
    container = _one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"] for e in container["env"]}
    assert "TIDEMARK_KAFKA_SSL_CA_LOCATION" not in env
    assert "kafka-tls" not in {m["name"] for m in container["volumeMounts"]}
    result = _kubeconform(k8s_tools, yaml.safe_dump_all(docs))
    assert result.returncode == 0, result.stdout + result.stderr


def test_kafka_client_settings_reach_the_app(
    k8s_tools: K8sTools, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kafka.client in values becomes TIDEMARK_KAFKA_CLIENT, which the app's settings read."""
    from app.config import load_settings

    docs = _docs(_render(k8s_tools, VALUES["kubernetes"], "kafka.client.client\\.id=purchases",
                         "kafka.client.compression\\.type=zstd",
                         "kafka.client.socket\\.keepalive\\.enable=true"))
    for container in _containers(docs):
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        monkeypatch.setenv("TIDEMARK_KAFKA_CLIENT", env["TIDEMARK_KAFKA_CLIENT"])
        monkeypatch.delenv("TIDEMARK_CONFIG", raising=False)
        conf = load_settings(None).kafka_config()
        assert conf["client.id"] == "purchases"
        assert conf["compression.type"] == "zstd"
        assert conf["socket.keepalive.enable"] == "true"


def test_the_charts_spark_conf_runs_tidemarks_session_and_logs_errors_as_json_lines(
    k8s_tools: K8sTools, tmp_path: Path
) -> None:
    """The default values' Spark configuration directory (spark-defaults.conf with
    authentication and encryption on, log4j2.properties) reaches a session made by
    app/runtime/session.py through SPARK_CONF_DIR with Spark's log on the console, as in the
    chart's pod (TIDEMARK_SPARK_LOG=console): Spark runs a job with Python tasks under it, and
    a streaming query that fails is logged on stdout as one JSON object, stack trace inside."""
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    docs = _docs(_render(k8s_tools, None))
    container = _one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    assert {e["name"]: e.get("value") for e in container["env"]}["TIDEMARK_SPARK_LOG"] == (
        "console")
    data = _one(docs, "ConfigMap", "-spark")["data"]
    # The pod's scratch directory; everything else as rendered.
    (conf_dir / "spark-defaults.conf").write_text(
        data["spark-defaults.conf"].replace("/var/lib/tidemark/spark-local",
                                            str(tmp_path / "spark-local"))
    )
    (conf_dir / "log4j2.properties").write_text(data["log4j2.properties"])
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import sys\n"
        "from app.runtime.session import spark_session\n"
        "spark = spark_session('local[1]', 1)\n"
        "conf = spark.sparkContext.getConf()\n"
        "print('probe: authenticate=' + conf.get('spark.authenticate', ''))\n"
        "print('probe: crypto=' + conf.get('spark.network.crypto.enabled', ''))\n"
        "doubled = spark.sparkContext.parallelize(range(10), 2).map(lambda x: x * 2)\n"
        "print('probe: sum=%d' % doubled.sum())\n"
        "def fail(batch, batch_id):\n"
        "    raise ValueError('step ' + str(batch_id) + ' refused by the probe')\n"
        "query = (spark.readStream.format('rate').load().writeStream.foreachBatch(fail)\n"
        "         .option('checkpointLocation', sys.argv[1]).start())\n"
        "try:\n"
        "    query.awaitTermination(120)\n"
        "except Exception:\n"
        "    print('probe: query failed')\n"
        "sys.stdout.flush()\n"
        "spark.stop()\n"
    )
    python = str(ROOT / ".venv" / "bin" / "python")
    env = {**tools_env(), "SPARK_CONF_DIR": str(conf_dir), "PYSPARK_PYTHON": python,
           "PYTHONPATH": str(ROOT)}
    result = subprocess.run([python, str(probe), str(tmp_path / "ck")], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert "probe: authenticate=true" in lines
    assert "probe: crypto=true" in lines
    assert "probe: sum=90" in lines
    assert "probe: query failed" in lines
    # Everything else on stdout is Spark's log, one JSON object per line.
    events = [json.loads(line) for line in lines if not line.startswith("probe: ")]
    failed = [e for e in events if e["level"] == "ERROR"
              and "refused by the probe" in json.dumps(e.get("exception", {}))]
    assert failed, result.stdout[-3000:]
    assert failed[0]["exception"]["stacktrace"]
    assert {"ts", "msg", "logger"} <= set(failed[0])
    assert "refused by the probe" not in result.stderr


def test_ci_never_makes_the_chart_checks_optional() -> None:
    """Without helm and kubeconform the chart's checks fail (tests/deploy/conftest.py) unless
    TIDEMARK_K8S_TOOLS_OPTIONAL=1; nothing CI runs sets it."""
    for path in ("Makefile", "scripts/run-tests.sh", ".ci/run"):
        assert "TIDEMARK_K8S_TOOLS_OPTIONAL" not in (ROOT / path).read_text(), path
    assert "install-k8s-tools.sh" in (ROOT / "Makefile").read_text()
