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
stage "unit and property tests" $bin/pytest -q -p no:cacheprovider -m "not slow and not e2e" \
  tests/unit tests/property "$@"
stage "deployment checks" $bin/pytest -q -p no:cacheprovider -m "not slow and not e2e" \
  tests/deploy "$@"
stage "end-to-end tests (real Kafka broker, Spark, Prometheus)" $bin/pytest -q --durations=30 \
  -p no:cacheprovider -m "e2e and not slow" tests/e2e tests/deploy tests/property "$@"
echo "make test took $(( $(date +%s) - started ))s"
exit $status
