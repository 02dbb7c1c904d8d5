#!/usr/bin/env bash
# A Spark standalone cluster on this machine (docs/deployment.md): one master
# and N workers (default 2), each its own JVM, started from the pyspark distribution in .venv.
#
#   scripts/spark-standalone.sh start    start (or find running) and print the master URL
#   scripts/spark-standalone.sh stop     stop the master and workers this directory started
#   scripts/spark-standalone.sh status   print the master URL and alive workers, exit 1 if down
#
# The pyspark wheel ships bin/spark-class and the jars but not sbin/start-master.sh, so the
# Master and Worker classes are run with spark-class directly. Everything binds to 127.0.0.1
# on free ports; the master's log and the pids go to $SPARK_STANDALONE_DIR (default
# var/spark-standalone/).
#
# Each worker is a machine of its own as far as writable paths go: worker-N/ holds its log
# (worker.log), its configuration directory (conf/, empty: SPARK_CONF_DIR, on its executors'
# class path), its work dir (work/: executors' directories and logs, SPARK_WORKER_DIR), its
# local dirs (local/: SPARK_LOCAL_DIRS, the executors' shuffle and block files, RocksDB's
# working copies of state) and its temporary dir (tmp/: TMPDIR for the worker, its executors
# and their Python workers, Tidemark's slice cache and producer claims; java.io.tmpdir,
# through JAVA_TOOL_OPTIONS, for the worker's and executors' JVMs: Spark's Python sockets,
# native libraries and scratch files). Executors
# inherit the worker's environment; the JVM reads JAVA_TOOL_OPTIONS before its command line,
# so an application's spark.executor.extraJavaOptions still wins. Workers share no writable
# path with each other or with the driver; a checkpoint every executor reaches must then be
# an s3a:// URL (docs/deployment.md). Env: SPARK_STANDALONE_WORKERS (2),
# SPARK_STANDALONE_WORKER_CORES (1), SPARK_STANDALONE_WORKER_MEMORY (1g),
# SPARK_STANDALONE_TIMEOUT seconds to wait for the workers to register (90).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${SPARK_STANDALONE_DIR:-$root/var/spark-standalone}"
workers="${SPARK_STANDALONE_WORKERS:-2}"
cores="${SPARK_STANDALONE_WORKER_CORES:-1}"
memory="${SPARK_STANDALONE_WORKER_MEMORY:-1g}"
timeout_s="${SPARK_STANDALONE_TIMEOUT:-90}"
python="$root/.venv/bin/python"
[[ -x "$python" ]] || python="python3"

spark_home() {
    "$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'
}

free_port() {
    "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# Alive workers as the master's web UI reports them (its /json endpoint), or "" if unreachable
# or not answering with JSON yet (a web UI still starting once answered with an empty body,
# which failed the start instead of waiting).
alive_workers() {
    "$python" - "$1" <<'PY'
import json, sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/json/", timeout=2) as reply:
        print(json.load(reply).get("aliveworkers", 0))
except (OSError, ValueError):
    print("")
PY
}

status() {
    if ! alive "$dir/master.pid" || [[ ! -f "$dir/master.url" ]]; then
        echo "spark-standalone: not running (state in $dir)" >&2
        return 1
    fi
    local n
    n="$(alive_workers "$(cat "$dir/master.webui-port")")"
    echo "$(cat "$dir/master.url") workers=${n:-?}"
}

stop() {
    local pidfile pid
    for pidfile in "$dir"/worker-*.pid "$dir"/master.pid; do
        [[ -f "$pidfile" ]] || continue
        pid="$(cat "$pidfile")"
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$pidfile"
    done
    rm -f "$dir/master.url" "$dir/master.webui-port"
}

# Worker $1 of the master at $2, with its own work, local and temporary dirs (see the top).
start_worker() {
    local own="$dir/worker-$1"
    if ((${#own} + 4 > 64)); then
        echo "spark-standalone: $own/tmp is longer than 64 bytes: Spark's Python workers on" \
            "Unix sockets (Tidemark sets them) cannot listen there; use a shorter" \
            "SPARK_STANDALONE_DIR" >&2
    fi
    mkdir -p "$own/work" "$own/local" "$own/tmp" "$own/conf"
    env SPARK_CONF_DIR="$own/conf" SPARK_WORKER_DIR="$own/work" SPARK_LOCAL_DIRS="$own/local" \
        TMPDIR="$own/tmp" JAVA_TOOL_OPTIONS="-Djava.io.tmpdir=$own/tmp" \
        nohup "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
        --host 127.0.0.1 --port "$(free_port)" --webui-port "$(free_port)" \
        --cores "$cores" --memory "$memory" --work-dir "$own/work" "$2" \
        >>"$own/worker.log" 2>&1 </dev/null &
    echo $! >"$dir/worker-$1.pid"
}

start() {
    if alive "$dir/master.pid" && [[ -f "$dir/master.url" ]]; then
        cat "$dir/master.url"
        return 0
    fi
    stop  # leftovers of a cluster that died
    mkdir -p "$dir"
    export SPARK_HOME
    SPARK_HOME="$(spark_home)"
    export SPARK_LOCAL_IP=127.0.0.1 SPARK_LOG_DIR="$dir" SPARK_NO_DAEMONIZE=1
    export SPARK_CONF_DIR="$dir/conf"  # empty: no spark-defaults from elsewhere leaks in
    # (the master's; each worker gets one of its own, as empty)
    mkdir -p "$SPARK_CONF_DIR"
    local port webui url i
    port="$(free_port)"
    webui="$(free_port)"
    url="spark://127.0.0.1:$port"
    nohup "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
        --host 127.0.0.1 --port "$port" --webui-port "$webui" \
        >"$dir/master.log" 2>&1 </dev/null &
    echo $! >"$dir/master.pid"
    echo "$webui" >"$dir/master.webui-port"
    for i in $(seq 1 "$workers"); do
        start_worker "$i" "$url"
    done
    local deadline=$((SECONDS + timeout_s)) n=""
    while ((SECONDS < deadline)); do
        n="$(alive_workers "$webui")"
        if [[ "$n" == "$workers" ]]; then
            echo "$url" >"$dir/master.url"
            echo "$url"
            return 0
        fi
        if ! alive "$dir/master.pid"; then break; fi
        sleep 0.5
    done
    echo "spark-standalone: $workers workers did not register within ${timeout_s}s" \
        "(alive: ${n:-none}); logs in $dir" >&2
    tail -n 20 "$dir/master.log" >&2 || true
    stop
    return 1
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
