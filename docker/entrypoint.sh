#!/usr/bin/env bash
# Entry point of the Tidemark image.
#
#   entrypoint.sh [tidemark arguments...]   exec `tidemark "$@"` (the image's CMD is `run`)
#   entrypoint.sh executor                  a Spark executor: Spark on Kubernetes starts executor
#                                           pods from this same image with the single argument
#                                           `executor` and its settings in SPARK_* variables
#
# The script only execs: no logging of its own, so nothing from the environment (SASL
# passwords, key passwords) is ever echoed. tini runs in front of it in the image, so the
# process it execs receives SIGTERM directly and ends the step in flight (SPEC S15, chart's
# terminationGracePeriodSeconds).
set -euo pipefail

if [[ "${1:-}" == "executor" ]]; then
    shift
    : "${SPARK_DRIVER_URL:?the executor needs SPARK_DRIVER_URL (set by the Spark driver)}"
    : "${SPARK_EXECUTOR_ID:?the executor needs SPARK_EXECUTOR_ID (set by the Spark driver)}"
    : "${SPARK_EXECUTOR_POD_IP:?the executor needs SPARK_EXECUTOR_POD_IP (set by the Spark driver)}"
    spark_home="${SPARK_HOME:-$(python -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')}"
    java="java"
    [[ -n "${JAVA_HOME:-}" ]] && java="$JAVA_HOME/bin/java"
    # The driver passes executor JVM options as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ...
    java_opts=()
    while IFS='=' read -r name _; do
        java_opts+=("${!name}")
    done < <(env | grep -E '^SPARK_JAVA_OPT_[0-9]+=' | sort -t_ -k4 -n)
    memory="${SPARK_EXECUTOR_MEMORY:-1g}"
    exec "$java" "${java_opts[@]}" "-Xms$memory" "-Xmx$memory" \
        -cp "${SPARK_CONF_DIR:-$spark_home/conf}:$spark_home/jars/*${SPARK_CLASSPATH:+:$SPARK_CLASSPATH}" \
        org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
        --driver-url "$SPARK_DRIVER_URL" \
        --executor-id "$SPARK_EXECUTOR_ID" \
        --cores "${SPARK_EXECUTOR_CORES:-1}" \
        --app-id "${SPARK_APPLICATION_ID:-}" \
        --hostname "$SPARK_EXECUTOR_POD_IP" \
        --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
        --podName "${SPARK_EXECUTOR_POD_NAME:-$(hostname)}" \
        "$@"
fi

exec tidemark "$@"
