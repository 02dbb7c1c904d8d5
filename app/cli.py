"""The ``tidemark`` command: one ``compile_program()`` -> ``run()`` path (STYLE habit 1).

Every user error (a broken program, bad configuration, an unreachable broker, a missing topic)
is a :class:`~app.errors.TidemarkError` and is printed as one clear message with exit code 2,
never a stack trace. A program is compiled and checked before Spark starts.
"""

from __future__ import annotations

import json
import time
from enum import StrEnum
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from app.config import SPARK_LOG_NAME, Settings, masked
from app.errors import ConfigError, ProgramError, TidemarkError

__all__ = ["DISTRIBUTION", "app", "main"]

#: The distribution whose version ``tidemark --version`` prints (pyproject.toml's name).
DISTRIBUTION = "tidemark"

app = typer.Typer(
    name="tidemark",
    help="Streaming SQL over Kafka with LATENESS, waterlines and dead letters, on Spark.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _installed_version() -> str:
    """The installed distribution's version; a source tree never installed has the
    package's own."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        from app import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"tidemark {_installed_version()}")
        raise typer.Exit(0)


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the installed version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    pass


def _from_env(help: str, envvar: str, default: str, param: Any = typer.Option) -> Any:
    """A parameter (``typer.Option`` or ``typer.Argument``) read from ``envvar`` when it is not
    given, its help showing the variable and ``default``."""
    return param(help=help, envvar=envvar, show_envvar=True, show_default=default)


def _setting(name: str, help: str, default: str | None = None) -> Any:
    """The option of setting ``name``: given, it wins over the setting's environment variable
    (read when it is not), which wins over the config file; its help shows the variable and
    the setting's default (``default`` where it is not a plain value)."""
    shown = default if default is not None else str(Settings.model_fields[name].default)
    return _from_env(help, f"TIDEMARK_{name.upper()}", shown)


def _fail(exc: TidemarkError) -> None:
    if isinstance(exc, ProgramError):
        for diagnostic in exc.diagnostics:
            typer.echo(str(diagnostic), err=True)
        count = sum(1 for d in exc.diagnostics if d.severity == "error")
        typer.echo(f"tidemark: the program was rejected ({count} error(s))", err=True)
    else:
        typer.echo(f"tidemark: error: {exc}", err=True)
    raise typer.Exit(2)


def _compile(program: Path) -> Any:
    from app.program.compile import compile_program

    if not program.is_file():
        raise TidemarkError(f"program file {program} does not exist")
    started = time.monotonic()
    circuit = compile_program(program)
    from app.observability.logging import get_logger

    log = get_logger("tidemark.cli")
    for warning in circuit.warnings:
        typer.echo(str(warning), err=True)
    log.info(
        "program.compiled",
        program=str(program),
        tables=len(circuit.tables),
        views=len(circuit.views),
        seconds=round(time.monotonic() - started, 3),
    )
    return circuit


@app.command()
def explain(
    program: Annotated[Path, typer.Argument(help="The SQL program file.")],
    format: Annotated[Literal["text", "json"], typer.Option("--format", help="Output format.")] = (
        "text"
    ),
    physical: Annotated[
        bool,
        typer.Option(
            "--physical",
            help="The physical plan: Spark queries, where each view is computed, which "
            "waterline frees its state (docs/architecture.md).",
        ),
    ] = False,
    against: Annotated[
        str | None,
        typer.Option(
            "--against",
            help="A checkpoint (directory or s3a:// URL): whether tidemark run would continue"
            " it with this "
            "program, or refuse and why (exit code 1); writes nothing (docs/adr/0015).",
        ),
    ] = None,
) -> None:
    """Print the compiled circuit: waterlines, what is late, state and when it is freed."""
    from app.circuit.explain import explain_json, explain_text
    from app.observability.logging import configure_logging

    configure_logging("console", "warning")
    try:
        circuit = _compile(program)
    except TidemarkError as exc:
        _fail(exc)
    from app.runtime.planner.compose import compose, read_stage_prefix, stage_text
    from app.runtime.planner.physical import explain_physical_json, explain_physical_text

    if against is not None:
        composed = compose(circuit, read_stage_prefix(against))
        _explain_against(composed.circuit, composed.physical, against, format)
        return
    # What `tidemark run` would refuse, in every form of explain, decided by the function run
    # calls (app/runtime/planner/compose.py): a program that compiles is not yet one that runs.
    composed = compose(circuit)
    plan = composed.physical
    refused = tuple(str(problem) for problem in composed.refused)
    if physical:
        if format == "json":
            data = explain_physical_json(plan) | {
                "stage_boundaries": sorted(composed.boundaries),
                "refused": list(refused),
            }
            typer.echo(json.dumps(data, indent=2, sort_keys=False))
        else:
            typer.echo(explain_physical_text(plan, refused), nl=False)
            typer.echo(stage_text(composed), nl=False)
    elif format == "json":
        data = explain_json(circuit) | {"refused_by_run": list(refused)}
        typer.echo(json.dumps(data, indent=2, sort_keys=False))
    else:
        typer.echo(explain_text(circuit), nl=False)
        if refused:
            typer.echo("\ntidemark run refuses this program (Spark does not run it yet):")
            for reason in refused:
                typer.echo(f"  {reason}")


def _explain_against(circuit: Any, plan: Any, checkpoint: str | Path, format: str) -> None:
    """``explain --against``: the verdict ``tidemark run`` would reach on ``checkpoint``
    (app/runtime/planner/checkpoint_plan.py), exit code 1 when it would refuse."""
    from app.runtime.planner.checkpoint_plan import judge_checkpoint
    from app.runtime.planner.plan_fingerprint import plan_fingerprint

    try:
        verdict = judge_checkpoint(checkpoint, plan_fingerprint(circuit, plan))
    except TidemarkError as exc:
        _fail(exc)
    if format == "json":
        changes = verdict.comparison.changes if verdict.comparison is not None else ()
        data = {
            "checkpoint": str(checkpoint),
            "verdict": verdict.verdict,
            "digest": verdict.fingerprint.digest,
            "recorded_by": verdict.recorded_by,
            "changes": [
                {"subject": c.subject, "change": c.text, "compatible": c.compatible}
                for c in changes
            ],
            "kept": list(verdict.comparison.kept) if verdict.comparison is not None else [],
        }
        typer.echo(json.dumps(data, indent=2))
    else:
        typer.echo(verdict.text(), nl=False)
    if verdict.refused:
        raise typer.Exit(1)


@app.command()
def run(
    program: Annotated[
        Path | None,
        _from_env("The SQL program file.", "TIDEMARK_PROGRAM", "none", typer.Argument),
    ] = None,
    bootstrap_servers: Annotated[
        str | None, _setting("bootstrap_servers", "Kafka bootstrap servers.")
    ] = None,
    checkpoint: Annotated[
        str | None,
        _setting("checkpoint", "Checkpoint: a directory, or s3a://BUCKET/PREFIX."),
    ] = None,
    once: Annotated[
        bool, typer.Option("--once", help="Process everything available now, then stop.")
    ] = False,
    spark_master: Annotated[str | None, _setting("spark_master", "Spark master URL.")] = None,
    metrics_port: Annotated[
        int | None, _setting("metrics_port", "Port of /metrics, /healthz; 0: any free port.")
    ] = None,
    config: Annotated[
        Path | None, _from_env("YAML config file.", "TIDEMARK_CONFIG", "none")
    ] = None,
    max_records_per_step: Annotated[
        int | None, _setting("max_records_per_step", "Records read per step.")
    ] = None,
    spark_log: Annotated[
        str | None, _setting("spark_log", "Spark's own logs: file or console.")
    ] = None,
    spark_log_file: Annotated[
        Path | None,
        _setting("spark_log_file", "File of Spark's logs.", f"CHECKPOINT/{SPARK_LOG_NAME}"),
    ] = None,
    schema_registry_url: Annotated[
        str | None,
        _setting("schema_registry_url", "Registry of 'avro-confluent' tables, views.", "none"),
    ] = None,
) -> None:
    """Run a program: read its tables' topics, write its views and dead letters."""
    from app.config import load_settings
    from app.observability.logging import configure_logging

    try:
        settings = load_settings(
            config,
            program=program,
            bootstrap_servers=bootstrap_servers,
            checkpoint=checkpoint,
            spark_master=spark_master,
            metrics_port=metrics_port,
            max_records_per_step=max_records_per_step,
            spark_log=spark_log,
            spark_log_file=spark_log_file,
            schema_registry_url=schema_registry_url,
        )
        configure_logging(settings.log_format, settings.log_level)
        if settings.program is None:
            raise TidemarkError("no program: give PROGRAM or set TIDEMARK_PROGRAM")
        circuit = _compile(settings.program)
        _run(circuit, settings, once)
    except TidemarkError as exc:
        _fail(exc)


def _route_spark_logs(log_file: Path | None) -> None:
    """Spark's Python loggers to ``log_file`` (None: the console), or a ConfigError that
    names the file when its directory cannot be made."""
    from app.observability.logging import route_spark_python_logs

    try:
        route_spark_python_logs(log_file)
    except OSError as exc:
        raise ConfigError(
            f"Spark's log file {log_file} cannot be written"
            f" ({exc.strerror or type(exc).__name__}): set --spark-log-file"
            " (TIDEMARK_SPARK_LOG_FILE) to a writable file, or --spark-log console"
        ) from exc


def with_schema_registry(circuit: Any, settings: Settings) -> Any:
    """The circuit with each ``avro-confluent`` table's and output's schema registry client
    settings complete (its ``'schema-registry.url'`` or the service's URL, with the service's
    credentials and TLS files), and each ``avro-confluent`` output's key and value schema
    found once, as Confluent's serializers find it (app/connectors/output_schemas.py): the
    subject's id, the subject and the schema its records are written in. A ConfigError names
    a table or view that has no registry; a SubjectSchemaError an output whose subject gives
    it no schema to write with."""
    from dataclasses import replace

    from app.circuit.metadata import REGISTRY_FORMATS
    from app.connectors.confluent_avro import REGISTRY_CLIENTS
    from app.connectors.json_encoder import json_schema
    from app.connectors.output_schemas import SerializerSettings, output_schema

    def conf(what: str, own: dict[str, str] | None, option: str) -> dict[str, str]:
        found = settings.schema_registry_config((own or {}).get("url"))
        if found is None:
            raise ConfigError(
                f"{what} has {option} but no schema registry: set"
                " --schema-registry-url (TIDEMARK_SCHEMA_REGISTRY_URL) or its"
                " 'schema-registry.url'"
            )
        try:
            REGISTRY_CLIENTS.get().get(found)  # no I/O: the settings are checked at start
        except ConfigError as exc:
            raise ConfigError(f"{what}: {exc}") from exc
        return found

    tables = tuple(
        replace(
            t,
            schema_registry=conf(
                f"table {t.name}",
                t.schema_registry,
                f"'format' = '{t.format}'" if t.format in REGISTRY_FORMATS
                else "'key.format' = 'avro-confluent'",
            ),
        )
        if t.format in REGISTRY_FORMATS or t.key_format == "avro-confluent"
        else t
        for t in circuit.tables
    )
    service = settings.registry_serializer()
    views = []
    for view in circuit.views:
        out = view.output
        registered = REGISTRY_FORMATS
        if out is not None and (out.encoding in registered or out.key_format == "avro-confluent"):
            value = out.encoding in registered
            registry = conf(
                f"view {view.name}",
                out.schema_registry,
                f"'encoding' = '{out.encoding}'" if value else "'key.format' = 'avro-confluent'",
            )
            options = {**service, **dict(out.serializer)}
            serializer = SerializerSettings(
                auto_register_schemas=options.get("auto.register.schemas", "true") == "true",
                use_latest_version=options.get("use.latest.version", "false") == "true",
                key_subject_name_strategy=options.get(
                    "key.subject.name.strategy", "TopicNameStrategy"
                ),
                value_subject_name_strategy=options.get(
                    "value.subject.name.strategy", "TopicNameStrategy"
                ),
                key_subject=options.get("key.subject"),
                value_subject=options.get("value.subject"),
            )
            key = value_found = None
            as_json = out.encoding == "json-registry"
            key_format = out.key_format or out.encoding
            if out.key_schema is not None and key_format in registered:
                key = output_schema(
                    registry, f"view {view.name}", out.topic, "key", out.key_schema, serializer,
                    json_schema(out.key_schema) if key_format == "json-registry" else None,
                    protobuf=key_format == "protobuf-confluent",
                )
            if value:
                value_found = output_schema(
                    registry, f"view {view.name}", out.topic, "value", out.value_schema,
                    serializer, json_schema(out.value_schema) if as_json else None,
                    protobuf=out.encoding == "protobuf-confluent",
                )
            out = replace(
                out,
                schema_registry=registry,
                key_schema=out.key_schema if key is None else key.schema,
                key_schema_id=None if key is None else key.schema_id,
                key_subject=None if key is None else key.subject,
                value_schema=out.value_schema if value_found is None else value_found.schema,
                value_schema_id=None if value_found is None else value_found.schema_id,
                value_subject=None if value_found is None else value_found.subject,
            )
            view = replace(view, output=out)
        views.append(view)
    return replace(circuit, tables=tables, views=tuple(views))


def _run(circuit: Any, settings: Settings, once: bool) -> None:
    from app import __version__
    from app.observability.listener import InputLagProbe, StepStall, TidemarkQueryListener
    from app.observability.logging import get_logger
    from app.observability.metrics import TidemarkMetrics
    from app.observability.server import BrokerReachability, MetricsServer, Readiness
    from app.runtime.service import Service, prepare_checkpoint

    log = get_logger("tidemark.cli")
    circuit = with_schema_registry(circuit, settings)
    # After the program compiled: a rejected program leaves no file behind.
    prepare_checkpoint(settings.checkpoint)
    _route_spark_logs(settings.spark_log_path)
    if settings.spark_log_path is not None:
        log.info("spark.logs", file=str(settings.spark_log_path))
    kafka_conf = settings.kafka_config()
    # Secrets (keys naming a password, secret or token) are masked.
    log.info("kafka.client", settings=masked(kafka_conf))
    metrics = TidemarkMetrics()
    metrics.set_build_info(__version__, str(settings.program))
    # Counters exist at zero from the start, so rate() and the alerts see the first change.
    for table in circuit.tables:
        metrics.declare_table(table.name, table.topic)
    for view in circuit.views:
        if view.output is not None:
            metrics.declare_output(view.name, view.output.topic)
    service = Service(circuit, settings, metrics=metrics)
    probe = InputLagProbe(metrics, kafka_conf)
    stall = StepStall(settings.liveness_stall_seconds, probe.observe)
    listener = TidemarkQueryListener(
        metrics,
        service.state_views(),
        probe,
        service.query_topics(),
        observe_step_duration=False,
        stall=stall,
    )
    server = MetricsServer(
        metrics.registry,
        Readiness(listener.queries_running, BrokerReachability(kafka_conf)),
        port=settings.metrics_port,
        liveness=stall,
    ).start()
    service.install_signal_handlers()
    try:
        service.start(once=once, listener=listener)
        log.info("service.running", once=once, metrics_port=server.port)
        service.wait()
    finally:
        # Queries and Spark first (Service.wait stopped the queries), then the Kafka clients
        # of this process, so none is left retrying a connection.
        service.shutdown()
        probe.close()
        server.stop()
    log.info("service.stopped")


@app.command()
def punctuate(
    topic: Annotated[str, typer.Option(help="The input topic of the quiet table.")],
    bound: Annotated[str, typer.Option(help="Time bound: ISO-8601 or epoch milliseconds.")],
    column: Annotated[str | None, typer.Option(help="Only this LATENESS column.")] = None,
    partition: Annotated[int | None, typer.Option(help="Partition (default: all).")] = None,
    bootstrap_servers: Annotated[
        str | None, _setting("bootstrap_servers", "Kafka bootstrap servers.")
    ] = None,
) -> None:
    """Send a punctuation: moves a quiet table's waterline like a row would (docs/time.md)."""
    from app.config import load_settings
    from app.connectors.late_gate import BOUND_HEADER, parse_bound
    from app.connectors.punctuation import send_punctuation

    try:
        settings = load_settings(None, bootstrap_servers=bootstrap_servers)
        try:
            parse_bound(bound)
        except ValueError as exc:
            raise TidemarkError(f"--bound {bound!r} is not ISO-8601 or epoch ms: {exc}") from exc
        header = f"{BOUND_HEADER}.{column}" if column else BOUND_HEADER
        sent = send_punctuation(settings.kafka_config(), topic, header, bound, partition)
        typer.echo(f"sent {header}={bound} to {topic} partition(s) {sent}")
    except TidemarkError as exc:
        _fail(exc)


@app.command()
def demo(
    duration_seconds: Annotated[int, typer.Option(help="How long to generate events.")] = 45,
    rate: Annotated[int, typer.Option(help="Events per second.")] = 200,
    late_fraction: Annotated[float, typer.Option(help="Share of events sent late.")] = 0.03,
    seed: Annotated[int, typer.Option(help="Random seed of the generator.")] = 7,
    spark_log: Annotated[
        str | None, _setting("spark_log", "Spark's own logs: file or console.")
    ] = None,
    spark_log_file: Annotated[
        Path | None, _setting("spark_log_file", "File of Spark's logs.", "var/demo/spark.log")
    ] = None,
    program: Annotated[
        Path | None,
        typer.Option(
            "--program",
            help="Run this program instead, on records generated from its tables' columns "
            "(e.g. pipelines/orders_trades.sql).",
        ),
    ] = None,
) -> None:
    """Start a local Kafka broker, generate out-of-order purchases and run a program with a
    filter view and a windowed aggregate on them (--program: any program, on generated
    records of its tables)."""
    from app.config import load_settings
    from app.demo import DEMO_SPARK_LOG, run_demo
    from app.observability.logging import configure_logging

    configure_logging("console", "warning")
    try:
        settings = load_settings(None, spark_log=spark_log, spark_log_file=spark_log_file)
        log_file = None
        if settings.spark_log == "file":
            log_file = settings.spark_log_file or DEMO_SPARK_LOG
        _route_spark_logs(log_file)
        ok = run_demo(duration_seconds, rate, late_fraction, seed, log_file, program)
    except TidemarkError as exc:
        _fail(exc)
    raise typer.Exit(0 if ok else 1)


dead_letters = typer.Typer(
    name="dead-letters",
    help="Inspect a table's dead-letter topic and replay its records (docs/reliability.md).",
    no_args_is_help=True,
)
app.add_typer(dead_letters)


class _Reason(StrEnum):
    late = "late"
    malformed = "malformed"
    invalid = "invalid"
    future = "future"


_DlqTopic = Annotated[
    str,
    typer.Option(
        "--topic",
        help="The dead-letter topic: the table's 'dead_letter' option, else <its topic>.dlq.",
    ),
]
_Servers = Annotated[str | None, _setting("bootstrap_servers", "Kafka bootstrap servers.")]
_Config = Annotated[
    Path | None,
    _from_env("YAML config file (Kafka security settings too).", "TIDEMARK_CONFIG", "none"),
]
_Reasons = Annotated[
    list[_Reason] | None, typer.Option("--reason", help="Only this reason; repeatable.")
]
_Tables = Annotated[list[str] | None, typer.Option("--table", help="Only this table; repeatable.")]
_Partitions = Annotated[
    list[int] | None, typer.Option("--partition", help="Only this partition; repeatable.")
]
_FromOffset = Annotated[
    int | None, typer.Option("--from-offset", help="First offset, in every partition.")
]
_ToOffset = Annotated[
    int | None, typer.Option("--to-offset", help="Last offset (included), in every partition.")
]
_Since = Annotated[
    str | None,
    typer.Option(
        "--since",
        help="Kafka timestamp (the source record's) at or after: ISO-8601, epoch ms, or a"
        " duration before now (2h).",
    ),
]
_Until = Annotated[
    str | None,
    typer.Option("--until", help="Kafka timestamp before: ISO-8601, epoch ms, or 2h."),
]


def _selection(
    reason: list[_Reason] | None,
    table: list[str] | None,
    partition: list[int] | None,
    from_offset: int | None,
    to_offset: int | None,
    since: str | None,
    until: str | None,
    limit: int | None,
    include_replayed: bool = True,
) -> Any:
    from app.dead_letters.selection import Selection

    return Selection.of(
        reasons=[r.value for r in reason or ()],
        tables=table or (),
        partitions=partition or (),
        from_offset=from_offset,
        to_offset=to_offset,
        since=since,
        until=until,
        limit=limit,
        include_replayed=include_replayed,
    )


def _kafka_conf(config: Path | None, bootstrap_servers: str | None) -> dict[str, str]:
    from app.config import load_settings

    return load_settings(config, bootstrap_servers=bootstrap_servers).kafka_config()


def _replayed(conf: dict[str, str], topic: str) -> dict[str, list[str]]:
    """For each dead letter's coordinates, where the ledger says it was replayed; a ledger
    that cannot be read is a warning, not a reason to show nothing."""
    from app.dead_letters.replay import read_ledger, replayed_targets
    from app.errors import KafkaError

    try:
        return replayed_targets(read_ledger(conf, topic))
    except KafkaError as exc:
        typer.echo(f"tidemark: warning: replays not shown: {exc}", err=True)
        return {}


@dead_letters.command("summary")
def dead_letters_summary(
    topic: _DlqTopic,
    reason: _Reasons = None,
    table: _Tables = None,
    partition: _Partitions = None,
    from_offset: _FromOffset = None,
    to_offset: _ToOffset = None,
    since: _Since = None,
    until: _Until = None,
    format: Annotated[Literal["text", "json"], typer.Option("--format", help="Output format.")] = (
        "text"
    ),
    bootstrap_servers: _Servers = None,
    config: _Config = None,
) -> None:
    """Counts by reason and table, time ranges, offsets per partition, replays."""
    from app.dead_letters.reading import SelectionReader
    from app.dead_letters.summary import Summary

    try:
        selection = _selection(
            reason, table, partition, from_offset, to_offset, since, until, None
        )
        conf = _kafka_conf(config, bootstrap_servers)
        reader = SelectionReader(conf, topic, selection)
        replayed = _replayed(conf, topic)
        summary = Summary(topic)
        for letter in reader:  # one at a time: a summary holds no records
            summary.add(letter, replayed.get(letter.coordinates, ()))
        summary.not_dead_letters = reader.foreign
    except TidemarkError as exc:
        _fail(exc)
    typer.echo(summary.to_json_text() if format == "json" else summary.to_text(), nl=False)


@dead_letters.command("show")
def dead_letters_show(
    topic: _DlqTopic,
    reason: _Reasons = None,
    table: _Tables = None,
    partition: _Partitions = None,
    from_offset: _FromOffset = None,
    to_offset: _ToOffset = None,
    since: _Since = None,
    until: _Until = None,
    limit: Annotated[
        int, typer.Option("--limit", help="At most this many records, the first selected.")
    ] = 100,
    program: Annotated[
        Path | None,
        typer.Option(
            "--program",
            help="Decode values (and keys of a 'key.format') with their table's schema in this"
            " program.",
        ),
    ] = None,
    format: Annotated[
        Literal["text", "json"], typer.Option("--format", help="Output format (json: one a line).")
    ] = "text",
    bootstrap_servers: _Servers = None,
    schema_registry_url: Annotated[
        str | None,
        _setting("schema_registry_url", "Registry of 'avro-confluent' tables.", "none"),
    ] = None,
    config: _Config = None,
) -> None:
    """The selected dead letters with their headers, keys and values."""
    from app.config import load_settings
    from app.dead_letters.reading import SelectionReader
    from app.dead_letters.show import ProgramDecoder, letter_json, letter_text
    from app.observability.logging import configure_logging

    configure_logging("console", "warning")  # stdout holds the records alone (JSON lines)
    try:
        selection = _selection(
            reason, table, partition, from_offset, to_offset, since, until, limit
        )
        settings = load_settings(
            config, bootstrap_servers=bootstrap_servers, schema_registry_url=schema_registry_url
        )
        conf = settings.kafka_config()
        decoder = (
            ProgramDecoder(program, settings.schema_registry_config)
            if program is not None
            else None
        )
        reader = SelectionReader(conf, topic, selection)
        replayed = _replayed(conf, topic)
        shown = 0
        for letter in reader:
            decoded = decoder.decode(letter) if decoder is not None else None
            key = decoder.decode_key(letter) if decoder is not None else None
            targets = replayed.get(letter.coordinates, ())
            if format == "json":
                typer.echo(json.dumps(letter_json(letter, decoded, targets, key)))
            else:
                typer.echo(letter_text(letter, decoded, targets, key))
            shown += 1
        if format == "text":
            more = f"; more match: raise --limit {limit}" if reader.more else ""
            typer.echo(f"{shown} dead letter(s) of {topic} ({selection.describe()}){more}")
        elif reader.more:
            typer.echo(f"tidemark: more dead letters match: raise --limit {limit}", err=True)
    except TidemarkError as exc:
        _fail(exc)


@dead_letters.command("replay")
def dead_letters_replay(
    topic: _DlqTopic,
    to: Annotated[str, typer.Option("--to", help="The topic to write the records to.")],
    reason: _Reasons = None,
    table: _Tables = None,
    partition: _Partitions = None,
    from_offset: _FromOffset = None,
    to_offset: _ToOffset = None,
    since: _Since = None,
    until: _Until = None,
    limit: Annotated[
        int | None, typer.Option("--limit", help="At most this many records, the first selected.")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Write records the ledger says were replayed again.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be written; write nothing.")
    ] = False,
    include_replayed: Annotated[
        bool,
        typer.Option(
            "--include-replayed",
            help="Also records a replay wrote that were refused again (left out by default).",
        ),
    ] = False,
    progress_every: Annotated[
        int, typer.Option("--progress-every", help="A progress line every this many records.")
    ] = 10_000,
    bootstrap_servers: _Servers = None,
    config: _Config = None,
) -> None:
    """Re-produce the selected dead letters to --to, recorded in the ledger <topic>.replays."""
    from app.dead_letters.replay import Replay

    started = time.monotonic()

    def progress(written: int, seconds: float) -> None:
        typer.echo(f"replay: {written} dead letter(s) written ({seconds:.0f} s)", err=True)

    try:
        if progress_every < 1:
            raise ConfigError(f"--progress-every {progress_every}: give at least 1")
        selection = _selection(
            reason, table, partition, from_offset, to_offset, since, until, limit,
            include_replayed,
        )
        conf = _kafka_conf(config, bootstrap_servers)
        report = Replay(
            conf, topic, to, selection, force=force, dry_run=dry_run, progress=progress,
            progress_every=progress_every,
        ).run()
    except TidemarkError as exc:
        _fail(exc)
    typer.echo(report.to_text(), nl=False)
    typer.echo(f"({selection.describe()}; {time.monotonic() - started:.1f} s)")


def main() -> None:
    app(prog_name="tidemark")


if __name__ == "__main__":
    main()
