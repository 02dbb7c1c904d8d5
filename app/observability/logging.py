"""Structured logs: structlog configured once, step context, late rows and dead letters.

Every log line is one JSON object (or a coloured console line on a terminal) carrying the
program, table/view and step it is about, bound as context variables so modules only log an
event name with key/value pairs (STYLE habit 6). Late rows are logged the way SPEC S6 asks:
per table, the 1st, 10th, 100th, ... late row with full detail, every one at debug level, so a
burst of a million late rows makes six warning lines, not a million.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import structlog
from structlog.typing import FilteringBoundLogger, Processor

__all__ = [
    "SPARK_PYTHON_LOGGERS",
    "LateRowLog",
    "LogFormat",
    "bind_program",
    "configure_logging",
    "get_logger",
    "jvm_output_path",
    "log_dead_letters",
    "powers_of_ten_between",
    "route_spark_python_logs",
    "spark_log4j2_properties",
    "step_context",
    "write_spark_log4j2_config",
]

LogFormat = Literal["json", "console"]


class _Stderr:
    """Whatever ``sys.stderr`` is when a line is written: a caller that swaps it for a while
    (a test runner invoking a command in-process) and closes its own stream afterwards must
    not leave the process's loggers writing to a closed file."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


def configure_logging(
    format: LogFormat | None = None, level: str | int = "INFO", *, stream: Any = None,
) -> None:
    """Configure structlog and the standard library's logging once, at process start.

    ``format=None`` picks ``console`` on a terminal and ``json`` otherwise (the default of
    ``TIDEMARK_LOG_FORMAT``). Logs go to stderr so stdout stays for command output
    (``tidemark explain``). Standard-library loggers (py4j, confluent-kafka's) are routed
    through the same renderer so a log shipper sees one format.
    """
    out: Any = stream if stream is not None else _Stderr()
    if format is None:
        format = "console" if getattr(out, "isatty", lambda: False)() else "json"
    level_no = level if isinstance(level, int) else logging.getLevelNamesMapping()[level.upper()]
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Processor
    if format == "json":
        shared += [structlog.processors.dict_tracebacks]
        renderer = structlog.processors.JSONRenderer(sort_keys=False)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=getattr(out, "isatty", lambda: False)())
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level_no),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    # Third-party chatter (py4j logs every callback at INFO) stays at WARNING or above.
    root.setLevel(max(level_no, logging.WARNING))


def get_logger(name: str | None = None) -> FilteringBoundLogger:
    """A structlog logger; ``name`` becomes the ``logger`` key so lines can be filtered."""
    logger: FilteringBoundLogger = structlog.get_logger()
    return logger.bind(logger=name) if name else logger


def bind_program(program: str) -> None:
    """Put the program file into every following log line of this thread and its children."""
    structlog.contextvars.bind_contextvars(program=program)


@contextmanager
def step_context(step: int, **names: str) -> Iterator[None]:
    """Bind ``step`` (and e.g. ``table=``/``view=``) to every log line inside the block.

    The runtime wraps each ``foreachBatch`` call in it, so a line logged while a step is
    processed says which step (SPEC S1) without every call site passing it.
    """
    with structlog.contextvars.bound_contextvars(step=step, **names):
        yield


def powers_of_ten_between(before: int, after: int) -> list[int]:
    """The 1-based ordinals ``n`` with ``before < n <= after`` that are powers of ten.

    SPEC S6 logs the 1st, 10th, 100th, ... late row of a table with full detail. A step that
    takes a table's late count from ``before`` to ``after`` logs those ordinals in detail.

    >>> powers_of_ten_between(0, 150)
    [1, 10, 100]
    >>> powers_of_ten_between(10, 99)
    []
    """
    if after <= before:
        return []
    ordinals = []
    n = 1
    while n <= after:
        if n > before:
            ordinals.append(n)
        n *= 10
    return ordinals


class LateRowLog:
    """Logs a table's late rows in powers of ten (SPEC S6), counting per table.

    Counts start at zero in each process: after a restart the 1st late row is again logged
    in detail, which is what an operator reading the new process's log wants.
    """

    def __init__(self, logger: FilteringBoundLogger | None = None) -> None:
        self._log = logger if logger is not None else get_logger("tidemark.late")
        self._seen: dict[str, int] = {}

    def seen(self, table: str) -> int:
        """How many late rows of ``table`` this process has logged."""
        return self._seen.get(table, 0)

    def detail_positions(self, table: str, count: int) -> list[int]:
        """0-based positions, among ``count`` late rows of the next step, that get full detail.

        Lets the runtime fetch only those rows from the executors when debug logging is off.
        """
        before = self.seen(table)
        return [n - before - 1 for n in powers_of_ten_between(before, before + count)]

    def log_step(
        self,
        table: str,
        rows: Sequence[Mapping[str, Any]] | Mapping[int, Mapping[str, Any]],
        count: int | None = None,
    ) -> list[int]:
        """Log one step's late rows of ``table`` and return the ordinals logged in detail.

        ``rows`` are the step's late rows in order (each with e.g. ``column``, ``value``,
        ``waterline``, ``topic``, ``partition``, ``offset``), or only the ones at
        :meth:`detail_positions` keyed by position, with ``count`` giving the step's total.
        """
        if count is None and isinstance(rows, Mapping):
            raise ValueError("log_step needs count= when given only the detail rows")
        total = count if count is not None else len(rows)
        by_position: Mapping[int, Mapping[str, Any]] = (
            rows if isinstance(rows, Mapping) else dict(enumerate(rows))
        )
        before = self.seen(table)
        detailed = powers_of_ten_between(before, before + total)
        for ordinal in detailed:
            row = by_position.get(ordinal - before - 1, {})
            self._log.warning("late_row", table=table, late_ordinal=ordinal, **row)
        if not isinstance(rows, Mapping):
            for position, row in enumerate(rows):
                self._log.debug("late_row", table=table, late_ordinal=before + position + 1, **row)
        self._seen[table] = before + total
        return detailed


def log_dead_letters(
    logger: FilteringBoundLogger, table: str, counts_by_reason: Mapping[str, int],
) -> None:
    """Log every dead-letter reason with its count for one step (SPEC S6, S7: nothing silent)."""
    for reason, count in sorted(counts_by_reason.items()):
        if count > 0:
            logger.info("dead_letters", table=table, reason=reason, count=count)


# Spark's own logs -------------------------------------------------------------------------
#
# With ``TIDEMARK_SPARK_LOG=file`` (the default) the console carries Tidemark's lines only.
# Spark's come from three places, and each goes to a file next to ``spark_log_file``:
#
# - the driver JVM's log4j2 (WARN lines, "Current batch is falling behind"): the file itself,
#   through the configuration :func:`write_spark_log4j2_config` writes, rolled at
#   :data:`SPARK_LOG_ROLL_SIZE` with :data:`SPARK_LOG_ROLLED_FILES` kept;
# - the JVM's own stdout and stderr (lines the JVM prints before log4j2 starts, and the
#   output of the Python worker daemon and workers, which Spark copies there):
#   :func:`jvm_output_path`, given to the JVM as its stdout and stderr at launch;
# - the driver's Python loggers of py4j and pyspark: the same file as log4j2's, through a
#   handler that reopens it after log4j2 rolled it (:func:`route_spark_python_logs`).

#: The driver process's Python loggers that belong to Spark rather than to Tidemark.
SPARK_PYTHON_LOGGERS = ("py4j", "pyspark")
#: Size at which the Spark log file is rolled to ``<file>.1`` (log4j2 size syntax).
SPARK_LOG_ROLL_SIZE = "16 MB"
#: How many rolled Spark log files are kept; older ones are deleted.
SPARK_LOG_ROLLED_FILES = 4

_SPARK_LOG4J2 = """\
# Written by Tidemark (app/observability/logging.py): the driver JVM's log4j2 output goes to
# {log_file}, rolled at {roll_size} with {rolled} older files kept.
status = error
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.filePattern = {log_file}.%i
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = {roll_size}
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = {rolled}
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
"""


def _properties_value(text: str) -> str:
    """``text`` as a Java properties value: backslashes escaped, leading blanks kept."""
    escaped = text.replace("\\", "\\\\")
    return "\\" + escaped if escaped[:1].isspace() else escaped


def spark_log4j2_properties(log_file: Path) -> str:
    """The log4j2 configuration that sends the driver JVM's logs to ``log_file`` (absolute),
    at WARN and above, rolled by size."""
    return _SPARK_LOG4J2.format(
        log_file=_properties_value(str(log_file.absolute())),
        roll_size=SPARK_LOG_ROLL_SIZE,
        rolled=SPARK_LOG_ROLLED_FILES,
    )


def write_spark_log4j2_config(log_file: Path) -> Path:
    """Write :func:`spark_log4j2_properties` beside ``log_file`` and return its path.

    The file is rewritten whole (write, then rename), so a JVM starting at the same moment
    reads either the old or the new configuration, never half of one.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    path = log_file.with_name(f"{log_file.stem}-log4j2.properties")
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text(spark_log4j2_properties(log_file))
    partial.replace(path)
    return path


def jvm_output_path(log_file: Path) -> Path:
    """Where the driver JVM's stdout and stderr go when Spark logs to ``log_file``:
    ``spark.log`` -> ``spark.out`` in the same directory."""
    return log_file.with_name(f"{log_file.stem}.out")


class _SparkLogHandler(logging.handlers.WatchedFileHandler):
    """The Spark Python loggers' file handler, told apart by :func:`route_spark_python_logs`."""


def route_spark_python_logs(log_file: Path | None) -> None:
    """Send the py4j and pyspark loggers to ``log_file`` instead of the console; ``None``
    sends them back through the root logger's handler (:func:`configure_logging`).

    Their level is WARNING either way (py4j logs every gateway call at INFO). The handler
    reopens the file when log4j2 has rolled it, so both write to the current file.
    """
    for name in SPARK_PYTHON_LOGGERS:
        logger = logging.getLogger(name)
        for handler in [h for h in logger.handlers if isinstance(h, _SparkLogHandler)]:
            logger.removeHandler(handler)
            handler.close()
        if log_file is None:
            logger.propagate = True
            continue
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handler = _SparkLogHandler(log_file, encoding="utf-8", delay=True)
        handler.setFormatter(
            logging.Formatter(
                "%(asctime)s %(levelname)s %(name)s: %(message)s", "%y/%m/%d %H:%M:%S"
            )
        )
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)
        logger.propagate = False
