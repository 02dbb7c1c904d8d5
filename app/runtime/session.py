"""The Spark session factory: one place that decides how Spark runs Tidemark.

Local mode by default (the embedded default of the demo and tests). Python workers must run
the interpreter that has Tidemark installed, so ``PYSPARK_PYTHON`` is pinned to it before the
JVM starts (the default picks the system python, whose missing packages look like a crash of
the Python worker). State lives in RocksDB so it is checkpointed with the offsets.

Given a ``spark_log`` file, the driver JVM is started with its log4j2 output in that file and
its stdout and stderr (with the Python worker daemon's and workers', which Spark copies there)
in the ``.out`` file beside it, so the console shows Tidemark's lines only
(:mod:`app.observability.logging`, ``TIDEMARK_SPARK_LOG``). A log4j2 configuration the
operator put in ``SPARK_CONF_DIR`` is left in charge of the JVM's log4j2 output.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import structlog
from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from app.config import ObjectStore
from app.errors import ConfigError
from app.observability.logging import jvm_output_path, write_spark_log4j2_config
from app.runtime.step.source_reader import KafkaSource

__all__ = [
    "COORDINATOR_JAVA_OPTIONS",
    "hadoop_aws_jars",
    "s3a_settings",
    "driver_java_options",
    "operator_log4j2_config",
    "spark_session",
]

log = structlog.get_logger("tidemark.session")

#: The driver JVM's options when it only coordinates. HotSpot's C2 compiler spends its CPU on
#: code that runs hot for long, and a coordinating JVM has none: over a 4M-event run of
#: benchmark (a) (a filter view, ADR 0007) its JIT compilers took 11-13 s of CPU, a third of
#: the service's, against 1.3 s in the task threads, and were still compiling Spark's
#: planning, scheduling and serialization code when the run ended. C1 alone compiled for
#: ~2 s, and the run went from 10.1 to 7.0 CPU s per million events (ADR 0009,
#: docs/performance.md). A JVM that aggregates keeps both compilers: there C1 alone cost a
#: fifth of the throughput (benchmark (b)).
COORDINATOR_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


def spark_session(
    master: str = "local[2]",
    shuffle_partitions: int = 4,
    app_name: str = "tidemark",
    local_dir: Path | None = None,
    rows_in_jvm: bool = True,
    spark_log: Path | None = None,
    object_store: ObjectStore | None = None,
) -> SparkSession:
    """The session, with the JVM started for it if none runs yet (then every setting here
    applies; an existing session keeps its JVM and takes only the runtime SQL settings).

    ``rows_in_jvm=False`` says that no query of the session computes over rows in the JVM:
    every table's views are computed in the source's Python tasks (ADR 0007), and the JVM
    only plans, schedules and keeps the logs. Such a JVM then compiles with C1 alone
    (:data:`COORDINATOR_JAVA_OPTIONS`).

    ``spark_log``: the file of Spark's own logs (see the module docstring); ``None`` leaves
    them on the console. Both apply only to a JVM started here.

    ``object_store``: the store of an ``s3a://`` checkpoint (ADR 0025): Spark's s3a://
    filesystem is put on the class path and configured from it, and its settings are handed
    to the Python workers as ``TIDEMARK_S3_*`` variables (this process's environment, which
    a local Spark's workers inherit, and ``spark.executorEnv``)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    python = os.environ["PYSPARK_PYTHON"]
    if master.startswith("local"):
        python = _local_python(python, local_dir)
    conf = (
        SparkConf(loadDefaults=False)
        .setMaster(master)
        .setAppName(app_name)
        .set("spark.ui.enabled", "false")
        .set("spark.ui.showConsoleProgress", "false")
        # The source's `kafka` option carries the client settings, SASL password included:
        # redact it (and anything named like a secret) wherever Spark prints a plan.
        .set("spark.sql.redaction.options.regex", "(?i)url|kafka|password|secret|token")
        .set("spark.sql.session.timeZone", "UTC")
        .set("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .set(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        # Every step writes Spark's offset log and commit log (and state files) through this.
        # The default (FileContext API) took 35-40 ms per small file on a local disk, this one
        # (FileSystem API, write then rename, atomic on a POSIX file system like the chart's
        # checkpoint volume) 11-22 ms: measured on an idle rate-source query. The
        # setting is Spark-internal and the class has moved package before: a Spark upgrade
        # that moves it again stops every query at start with CANNOT_LOAD_CHECKPOINT_FILE_MANAGER.
        .set(
            "spark.sql.streaming.checkpointFileManagerClass",
            "org.apache.spark.sql.execution.streaming.checkpointing."
            "FileSystemBasedCheckpointFileManager",
        )
        .set("spark.sql.execution.arrow.maxRecordsPerBatch", "20000")
        # Spark's default 64 MB cap on the Arrow batches it sends to Python workers is checked
        # by sizing the batch after every row, which walks the nested `headers` vectors each
        # time: a JVM profile of benchmark (a) showed it as the hottest frame, and lifting the
        # cap (Int.MaxValue skips the check) took the run from 41.7 s to 28.3 s. Batches stay
        # bounded by maxRecordsPerBatch rows.
        .set("spark.sql.execution.arrow.maxBytesPerBatch", str(2**31 - 1))
        .set("spark.python.worker.reuse", "true")
        # Spark talks to its Python workers over loopback TCP by default, and every Python
        # task then lost ~40 ms (the length of Linux's delayed ACK) waiting for its input: a
        # trivial two-task mapInArrow job's tasks took 61 ms, 27 ms over a Unix domain
        # socket, an RDD map's 53 and 13 ms (measured with Spark's event log).
        # A step of Tidemark runs two Python stages (the source's read, the writing
        # mapInArrow), so this was ~80 ms of every step; the plain Spark job has none. The
        # sockets are files in the JVM's temporary directory (/tmp: an emptyDir in the chart's
        # pod, whose root file system is read-only). loadtests.worker_socket measures it.
        .set("spark.python.unix.domain.socket.enabled", "true")
        .set("spark.python.daemon.module", "app.runtime.worker_daemon")
        # With no input waiting, Spark asks the source for new offsets again after this long
        # (10 ms by default). Steps run back to back by default (trigger interval 0), and at
        # 10 ms an idle service took 15% of a core asking Kafka for its end offsets; at
        # 100 ms 4% (1% with a 1 s trigger): measured with no input. Under load a
        # step always finds input, so it never waits; after a quiet spell the first record
        # waits at most this long.
        .set("spark.sql.streaming.pollingDelay", "100ms")
        .set("spark.sql.adaptive.enabled", "false")
        # A query may compute one stateful aggregation twice (a native view's own records and
        # its readers' rows, ADR 0014; a boundary view's twin, ADR 0023). With exchange reuse
        # Spark feeds the second from the first's shuffle, and its windows are then evicted a
        # step late, after its readers have taken the step's watermark as the bound for late
        # rows: a cascaded window that a row completes in that step is lost. A streaming plan
        # has no other equal exchanges to share.
        .set("spark.sql.exchange.reuse", "false")
        .set("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
    )
    if local_dir is not None:
        conf.set("spark.local.dir", str(local_dir))
    if object_store is not None:
        for key, value in s3a_settings(object_store).items():
            conf.set(key, value)
        for name, value in object_store.environment().items():
            conf.set(f"spark.executorEnv.{name}", value)
            os.environ[name] = value
    java_options = driver_java_options(rows_in_jvm, spark_log)
    if java_options:
        # Spark prepends these to spark.driver.extraJavaOptions (the chart's spark-defaults
        # sets those), so an operator's own -XX:TieredStopAtLevel or
        # -Dlog4j2.configurationFile there still wins.
        conf.set("spark.driver.defaultJavaOptions", java_options)
    # What Spark starts its Python processes with is read from the environment when the JVM
    # and the SparkContext start (the JVM's data source lookup takes PYSPARK_DRIVER_PYTHON);
    # the process's own settings are left as they were.
    configured = {name: os.environ[name] for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    os.environ.update(dict.fromkeys(configured, python))
    try:
        # A JVM already running (started by an earlier session of this process) keeps the
        # output streams and options it was started with.
        if spark_log is not None and SparkContext._gateway is None:
            _start_jvm(conf, jvm_output_path(spark_log))
        spark = SparkSession.builder.config(conf=conf).getOrCreate()
    finally:
        os.environ.update(configured)
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(KafkaSource)
    return spark


#: Where scripts/fetch-s3proxy.sh puts hadoop-aws and its AWS SDK bundle.
_FETCHED_JARS = Path(__file__).resolve().parents[2] / ".cache" / "hadoop-aws" / "libs"


def hadoop_aws_jars(store: ObjectStore) -> list[Path]:
    """The jars of Spark's s3a:// filesystem: those in ``store.jars``, else those
    ``scripts/fetch-s3proxy.sh`` fetched; none when pyspark already ships hadoop-aws. A
    ConfigError naming the fix when they are nowhere."""
    import pyspark

    if any((Path(pyspark.__file__).parent / "jars").glob("hadoop-aws-*.jar")):
        return []
    directory = store.jars or _FETCHED_JARS
    jars = sorted(directory.glob("*.jar")) if directory.is_dir() else []
    if not any(jar.name.startswith("hadoop-aws-") for jar in jars):
        raise ConfigError(
            f"an s3a:// checkpoint needs Spark's s3a filesystem (hadoop-aws and the AWS SDK"
            f" bundle), and {directory} has no hadoop-aws jar: run scripts/fetch-s3proxy.sh"
            " (make setup), or set TIDEMARK_S3_JARS to a directory holding them"
        )
    return jars


#: Hadoop's default ``fs.s3a.aws.credentials.provider`` list (core-default.xml of its 3.4
#: and 3.5 releases) with the AWS SDK's web identity provider before the instance's role,
#: the AWS SDKs' own order.
S3A_WEB_IDENTITY_PROVIDERS = ",".join((
    "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider",
    "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider",
    "software.amazon.awssdk.auth.credentials.WebIdentityTokenFileCredentialsProvider",
    "org.apache.hadoop.fs.s3a.auth.IAMInstanceCredentialsProvider",
))


def s3a_settings(store: ObjectStore) -> dict[str, str]:
    """The Spark settings of an s3a:// checkpoint on ``store``: its jars on the class path
    and Hadoop's ``fs.s3a.*`` from the same settings Tidemark's own files use."""
    out: dict[str, str] = {
        "spark.hadoop.fs.s3a.endpoint.region": store.region,
        "spark.hadoop.fs.s3a.path.style.access": str(store.path_style).lower(),
    }
    if store.endpoint is not None:
        out["spark.hadoop.fs.s3a.endpoint"] = store.endpoint
        out["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(
            store.endpoint.startswith("https://")
        ).lower()
    if store.access_key_id is not None and store.secret_access_key is not None:
        out["spark.hadoop.fs.s3a.access.key"] = store.access_key_id
        out["spark.hadoop.fs.s3a.secret.key"] = store.secret_access_key.get_secret_value()
    elif os.environ.get("AWS_WEB_IDENTITY_TOKEN_FILE") and os.environ.get("AWS_ROLE_ARN"):
        # s3a's default provider list has no web identity (IRSA): the SDK's own default
        # chain does, s3a's does not (Hadoop's core-default.xml), so name it there.
        out["spark.hadoop.fs.s3a.aws.credentials.provider"] = S3A_WEB_IDENTITY_PROVIDERS
    jars = os.pathsep.join(str(jar) for jar in hadoop_aws_jars(store))
    if jars:
        out["spark.driver.extraClassPath"] = jars
        out["spark.executor.extraClassPath"] = jars
    return out


#: Names log4j2 looks for on the classpath, where spark-submit puts SPARK_CONF_DIR.
_LOG4J2_FILES = ("log4j2.properties", "log4j2.xml", "log4j2.yaml", "log4j2.yml", "log4j2.json")


def operator_log4j2_config() -> Path | None:
    """The log4j2 configuration in the Spark configuration directory the driver JVM will read
    (``SPARK_CONF_DIR``, else ``$SPARK_HOME/conf`` as spark-submit does), if there is one."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if not conf_dir:
        import pyspark

        spark_home = os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__).parent)
        conf_dir = os.path.join(spark_home, "conf")
    for name in _LOG4J2_FILES:
        path = Path(conf_dir) / name
        if path.is_file():
            return path
    return None


def _java_option(text: str) -> str:
    """One JVM option as Spark splits ``spark.driver.defaultJavaOptions``: quoted when it
    holds a blank or a quote."""
    if not any(c.isspace() or c in "\"'\\" for c in text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def driver_java_options(rows_in_jvm: bool, spark_log: Path | None) -> str:
    """``spark.driver.defaultJavaOptions`` of a new driver JVM: C1 alone for a JVM that
    only coordinates, and the log4j2 configuration that writes to ``spark_log`` (written
    here) unless the operator's Spark configuration directory has one."""
    options = [] if rows_in_jvm else [COORDINATOR_JAVA_OPTIONS]
    if spark_log is not None:
        operator = operator_log4j2_config()
        if operator is None:
            config = write_spark_log4j2_config(spark_log)
            options.append(_java_option(f"-Dlog4j2.configurationFile={config.absolute()}"))
        else:
            log.info("session.operator_log4j2", config=str(operator))
    return " ".join(options)


def _start_jvm(conf: SparkConf, output: Path) -> None:
    """Start the driver JVM and its SparkContext with the JVM's stdout and stderr appended
    to ``output``; the Python processes Spark starts inherit those streams (their stderr
    is copied to the JVM's), so a worker's last words land there too."""
    from pyspark.java_gateway import launch_gateway

    output.parent.mkdir(parents=True, exist_ok=True)
    with open(output, "ab") as stream:
        gateway = launch_gateway(  # type: ignore[no-untyped-call]
            conf, popen_kwargs={"stdout": stream, "stderr": stream}
        )
    SparkContext(conf=conf, gateway=gateway)


def _local_python(python: str, local_dir: Path | None) -> str:
    """The command a local Spark starts its Python processes with: ``python`` itself, or,
    when it is this process's interpreter, a script that runs it with pyspark imported from
    its installed package instead of from the zip files Spark puts first on their PYTHONPATH.

    Python compiles a module imported from a zip file from source every time (it cannot
    cache the bytecode there): each of the half-dozen processes Spark starts for a query
    (the Python source's planners and runner, the worker daemon) spent 0.5-0.7 s of CPU
    importing pyspark so, and each forked worker another ~0.2 s rereading the zip's
    directory on its first task (``python -c 'import pyspark.worker'``: 0.69 s from
    the zip, 0.15 s from the package). The package is the same pyspark, as the zip files
    are those inside it: only those two paths are dropped. Any other interpreter may need
    the zip, and on a cluster the script would not exist on the executors.
    """
    if os.path.abspath(python) != os.path.abspath(sys.executable):
        return python
    import pyspark

    lib = Path(pyspark.__file__).resolve().parent / "python" / "lib"
    zips = sorted(str(path) for path in lib.glob("*.zip"))
    if not zips:
        return python
    same = " || ".join(f'[ "$entry" -ef {shlex.quote(path)} ]' for path in zips)
    script = (
        "#!/bin/sh\n"
        "# Written by Tidemark (app/runtime/session.py): runs the interpreter below with\n"
        "# pyspark from its package, not from Spark's zip files of the same pyspark.\n"
        "set -f\n"
        "kept=\n"
        "IFS=:\n"
        "for entry in $PYTHONPATH; do\n"
        f"  if {same}; then continue; fi\n"
        '  kept="${kept:+$kept:}$entry"\n'
        "done\n"
        "unset IFS\n"
        'if [ -n "$kept" ]; then export PYTHONPATH="$kept"; else unset PYTHONPATH; fi\n'
        f'exec {shlex.quote(os.path.abspath(python))} "$@"\n'
    )
    digest = hashlib.sha256(script.encode()).hexdigest()[:16]
    directory = local_dir if local_dir is not None else Path(tempfile.gettempdir())
    path = directory / f"tidemark-python-{os.getuid()}-{digest}"
    try:
        if not path.is_file():
            directory.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            partial.write_text(script)
            partial.chmod(0o755)
            os.replace(partial, path)
        # A temporary directory mounted noexec cannot run it: find out here, not in Spark.
        subprocess.run([str(path), "-c", ""], check=True, timeout=30, capture_output=True)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("session.python_script_unusable", path=str(path), error=str(exc))
        return python
    return str(path)
