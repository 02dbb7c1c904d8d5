#!/usr/bin/env bash
# Install a real Prometheus server and promtool from Debian's `prometheus` package when either is
# missing (idempotent: does nothing once both are on PATH). The Debian service is never started:
# tests and the demo run their own server with their own config (tests/e2e/prometheus.py).
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
    exit 0
fi
if [[ "$(id -u)" -ne 0 ]]; then
    sudo_cmd=(sudo)
else
    sudo_cmd=()
fi
echo "installing Debian's prometheus package (prometheus + promtool)..." >&2
# policy-rc.d exit 101 keeps dpkg from starting the packaged service during the install.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo_cmd[@]}" tee "$policy" >/dev/null
    "${sudo_cmd[@]}" chmod +x "$policy"
    created_policy=1
fi
cleanup() {
    if [[ "$created_policy" -eq 1 ]]; then "${sudo_cmd[@]}" rm -f "$policy"; fi
}
trap cleanup EXIT
"${sudo_cmd[@]}" apt-get update -q
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends prometheus
command -v prometheus >/dev/null && command -v promtool >/dev/null
echo "prometheus $(prometheus --version 2>&1 | head -1)" >&2
