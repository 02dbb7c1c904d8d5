#!/usr/bin/env bash
# The test run of `make test` (and so of CI): lint, the fast suites, then the end-to-end suites.
# pytest exit code 5 ("no tests collected") is not a failure of a stage that may be empty.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bin=.venv/bin
started=$(date +%s)
status=0

stage() {
  local name=$1; shift
  echo "=== $name ==="
  "$@"
  local rc=$?
  if [[ $rc -eq 5 ]]; then rc=0; fi
  if [[ $rc -ne 0 ]]; then echo "=== $name FAILED (exit $rc) ==="; status=1; fi
}

stage "ruff" $bin/ruff check app tests $( [[ -d loadtests ]] && echo loadtests )
stage "mypy" $bin/mypy app
# The unit and deployment stages share nothing (each fixture takes its own ports and
# directories) and each keeps about one core busy, so they run side by side; each one's
# output is printed whole when both are done.
logs=$(mktemp -d)
$bin/pytest -q -p no:cacheprovider -m "not slow and not e2e" tests/unit tests/property "$@" \
  > "$logs/unit" 2>&1 &
unit=$!
$bin/pytest -q -p no:cacheprovider -m "not slow and not e2e" tests/deploy "$@" \
  > "$logs/deploy" 2>&1 &
deploy=$!
wait $unit; unit_rc=$?
wait $deploy; deploy_rc=$?
stage "unit and property tests" bash -c 'cat "$1"; exit "$2"' _ "$logs/unit" $unit_rc
stage "deployment checks" bash -c 'cat "$1"; exit "$2"' _ "$logs/deploy" $deploy_rc
rm -rf "$logs"
stage "end-to-end tests (real Kafka broker, Spark, Prometheus)" $bin/pytest -q --durations=30 \
  -p no:cacheprovider -m "e2e and not slow" tests/e2e tests/deploy tests/property "$@"
echo "make test took $(( $(date +%s) - started ))s"
exit $status
