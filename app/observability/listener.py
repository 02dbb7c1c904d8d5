"""Metrics from Spark's own progress reports: state size, step duration, query up, input lag.

The ``foreachBatch`` function of the runtime counts rows and computes waterlines (SPEC S3);
what only Spark knows (how big each stateful operator's state store is, how long a trigger
took, whether a query still runs) arrives through a :class:`StreamingQueryListener`, whose
callbacks run in the driver process. Spark reports state per *operator*, in plan order; the
runtime tells the listener which view each operator belongs to, so ``tidemark_state_rows``
is labelled with the view names a user wrote (SPEC S11: the state of a windowed view must
stay bounded, and this is where an operator sees that it does).

Input lag (end offset minus processed offset per partition) needs the broker's high
watermarks: :class:`InputLagProbe` asks for them with one cached consumer and a short timeout,
and never raises into the query: a metric is not worth a failed step.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyspark.sql.streaming.listener import (
    JStreamingQueryListener,
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from app.observability.logging import get_logger
from app.observability.metrics import TidemarkMetrics

__all__ = [
    "EndOffsets",
    "InputLagProbe",
    "ProgressListener",
    "StateViews",
    "StepStall",
    "TidemarkQueryListener",
    "parse_end_offsets",
]

EndOffsets = Mapping[str, Mapping[str, int]]
"""Processed end offsets of a step: ``{"<topic>": {"<partition>": next_offset}}`` (the source's
offset JSON): the offset of the next record to read, so lag = high watermark - this."""

StateViews = Mapping[str, Sequence[str | None]] | Callable[[str, str | None], Sequence[str | None]]
"""Per query (keyed by query id, or by query name), the view of each stateful operator in the
order Spark lists them in ``progress.stateOperators``; ``None`` for an operator that is not a
view's state (for example a late gate). A view with several operators appears several times
and its numbers are summed. A callable gets ``(query_id, query_name)``."""

_log = get_logger("tidemark.listener")


def _partition_offsets(partitions: Any) -> dict[str, int]:
    if not isinstance(partitions, dict):
        return {}
    return {
        str(p): int(o) for p, o in partitions.items()
        if str(p).isdigit() and isinstance(o, int) and not isinstance(o, bool)
    }


def parse_end_offsets(
    offset_json: str | None, topic: str | None = None,
) -> dict[str, dict[str, int]]:
    """Read a source progress ``endOffset`` into :data:`EndOffsets`; ``{}`` when it does not fit.

    Two shapes are understood: Tidemark's Kafka source, ``{"topic": t, "partitions":
    {"<p>": next}, "step": n, ...}`` (``topic`` is for offsets that do not name theirs), and
    the per-topic shape ``{"<topic>": {"<p>": next}}`` of Spark's JVM Kafka source. Anything
    else (a rate source's offsets, say) is ignored, not an error.
    """
    if not offset_json:
        return {}
    try:
        parsed = json.loads(offset_json)
    except ValueError:
        return {}
    if not isinstance(parsed, dict):
        return {}
    if "partitions" in parsed:
        own = _partition_offsets(parsed["partitions"])
        # The source names its topic (a query may read several); older offsets do not.
        named = parsed.get("topic") if isinstance(parsed.get("topic"), str) else topic
        return {named: own} if named is not None and own else {}
    offsets: dict[str, dict[str, int]] = {}
    for name, partitions in parsed.items():
        numeric = _partition_offsets(partitions)
        if numeric:
            offsets[str(name)] = numeric
    return offsets


class InputLagProbe:
    """Sets ``tidemark_input_lag_records`` from the broker's high watermarks.

    One confluent-kafka consumer, created on first use and reused (a consumer per step would
    open connections every second). It never joins a group and never commits: it only asks
    for watermarks. Failures are logged and skipped: the gauge keeps its last value.
    """

    def __init__(
        self,
        metrics: TidemarkMetrics,
        kafka_config: Mapping[str, Any],
        timeout_seconds: float = 1.0,
    ) -> None:
        self._metrics = metrics
        self._config = {
            **dict(kafka_config),
            "group.id": str(kafka_config.get("group.id", "tidemark-input-lag-probe")),
            "enable.auto.commit": False,
        }
        self._timeout = timeout_seconds
        self._consumer: Any = None
        self._lock = threading.Lock()

    def observe(self, end_offsets: EndOffsets) -> dict[tuple[str, int], int]:
        """Set the lag gauge of every partition in ``end_offsets``; returns what it set.

        Runs in the driver after a step; takes at most ``timeout_seconds`` per partition when
        the broker is slow and returns early (with nothing set) once one request fails, so a
        dead broker costs one timeout per step, not one per partition.
        """
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        lags: dict[tuple[str, int], int] = {}
        with self._lock:
            try:
                if self._consumer is None:
                    self._consumer = Consumer(self._config)
                for topic, partitions in end_offsets.items():
                    for partition, processed in partitions.items():
                        _low, high = self._consumer.get_watermark_offsets(
                            TopicPartition(topic, int(partition)),
                            timeout=self._timeout, cached=False,
                        )
                        lag = max(0, int(high) - int(processed))
                        self._metrics.set_input_lag(topic, int(partition), lag)
                        lags[(topic, int(partition))] = lag
            except (KafkaException, RuntimeError, ValueError, TypeError) as exc:
                _log.warning("input_lag_probe_failed", error=str(exc))
        return lags

    def close(self) -> None:
        """Close the consumer (idempotent)."""
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None


class StepStall:
    """Liveness: a query whose last step finished more than ``stall_seconds`` ago while its
    input waits has stalled (a step hangs, or steps no longer start).

    The listener reports each finished step with the offsets it read up to
    (:meth:`step_finished`). Only once a query has been quiet that long is the broker asked,
    through the lag probe, whether records wait beyond those offsets: an idle query (nothing
    waits) is alive however long it is quiet, and a broker that does not answer leaves the
    answer at alive (readiness reports the broker, and a restart would not bring it back).
    A query that has not finished its first step yet is not judged (the startup probe covers
    the start). ``stall_seconds=0`` turns the check off.
    """

    def __init__(
        self,
        stall_seconds: float,
        lag_probe: Callable[[EndOffsets], Mapping[tuple[str, int], int]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stall = stall_seconds
        self._probe = lag_probe
        self._clock = clock
        self._lock = threading.Lock()
        self._finished: dict[str, tuple[float, EndOffsets]] = {}

    def step_finished(self, query: str, end_offsets: EndOffsets) -> None:
        """A step of ``query`` finished, having read ``end_offsets`` (a step whose progress
        names no offsets keeps the ones seen before)."""
        with self._lock:
            known = end_offsets or self._finished.get(query, (0.0, {}))[1]
            self._finished[query] = (self._clock(), known)

    def query_stopped(self, query: str) -> None:
        """A stopped query is readiness' concern, no longer liveness'."""
        with self._lock:
            self._finished.pop(query, None)

    def __call__(self) -> tuple[bool, str]:
        """(alive, reason), for ``/healthz``."""
        if self._stall <= 0:
            return True, "ok"
        now = self._clock()
        with self._lock:
            quiet = [(q, now - at, offsets) for q, (at, offsets) in self._finished.items()
                     if now - at >= self._stall and offsets]
        for query, seconds, offsets in quiet:
            waiting = sum(lag for lag in self._probe(offsets).values() if lag > 0)
            if waiting:
                return False, (
                    f"query {query}: no step finished for {seconds:.0f} s while {waiting}"
                    " records wait"
                )
        return True, "ok"


class _ProgressFromJson(JStreamingQueryListener):
    """PySpark's adapter of a Python listener, but a progress event is read from its JSON."""

    def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802 - Spark's name
        progress = json.loads(jevent.progress().json())
        self.pylistener.onQueryProgress(QueryProgressEvent.fromJson({"progress": progress}))


class ProgressListener(StreamingQueryListener):
    """A streaming query listener whose progress events cost the driver one py4j call.

    PySpark builds the event it hands a listener field by field over py4j: about 150 calls a
    step, six of which end a Java map's iteration in an exception that PySpark's error
    conversion identifies by class lookups through every jar on the class path. Measured on
    a stateful query: 150-210 ms of the driver per progress event (against 1 ms for the
    progress's JSON), every step, while the next step plans. Built from the JSON
    with PySpark's own ``fromJson`` (the form Spark Connect uses), the event is the same
    :class:`StreamingQueryProgress`. Register it with ``spark.streams.addListener`` as any
    listener; only how its Java side converts a progress event differs."""

    @property
    def _jlistener(self) -> Any:
        # PySpark's addListener and removeListener register this object; the same property
        # of StreamingQueryListener wraps PySpark's own adapter instead.
        from pyspark import SparkContext

        wrapper = self.__dict__.get("_jlistener_json")
        if wrapper is None:
            assert SparkContext._jvm is not None, "no Spark session is running"
            wrapper = SparkContext._jvm.PythonStreamingQueryListenerWrapper(
                _ProgressFromJson(self)
            )
            self.__dict__["_jlistener_json"] = wrapper
        return wrapper


class TidemarkQueryListener(ProgressListener):
    """Feeds :class:`TidemarkMetrics` from Spark's streaming query events.

    On each progress event: state rows and bytes per view (``numRowsTotal``,
    ``memoryUsedBytes`` of ``progress.stateOperators``), the step duration
    (``durationMs['triggerExecution']``, the whole step: planning, offset log, batch, commit),
    and, when a lag probe is given, input lag from the sources' ``endOffset``; the topic of a
    query whose source reports only partitions comes from ``query_topics`` (keyed by query id
    or name). Started/terminated events set ``tidemark_query_up``. Register it with
    ``spark.streams.addListener`` *before* starting the queries so no start is missed.
    ``observe_step_duration=False`` leaves the step histogram to the caller (so a
    ``foreachBatch`` that times steps itself does not count each step twice). ``stall``
    is told of every finished step (liveness, :class:`StepStall`).
    """

    def __init__(
        self,
        metrics: TidemarkMetrics,
        state_views: StateViews | None = None,
        lag_probe: InputLagProbe | None = None,
        query_topics: Mapping[str, str] | None = None,
        observe_step_duration: bool = True,
        stall: StepStall | None = None,
    ) -> None:
        self._metrics = metrics
        self._stall = stall
        self._state_views = state_views if state_views is not None else {}
        self._lag_probe = lag_probe
        self._query_topics = dict(query_topics or {})
        self._observe_steps = observe_step_duration
        self._lock = threading.Lock()
        self._names: dict[str, str] = {}
        self._running: dict[str, bool] = {}
        self._last_batch: dict[str, int] = {}

    def queries_running(self) -> bool:
        """True while at least one query started and none has terminated (readiness)."""
        with self._lock:
            return bool(self._running) and all(self._running.values())

    def _label(self, query_id: str, name: str | None) -> str:
        return name or self._names.get(query_id) or query_id

    def onQueryStarted(self, event: QueryStartedEvent) -> None:  # noqa: N802 - Spark's name
        """Mark the query up (label: its name, else its id, which survives restarts)."""
        query_id = str(event.id)
        with self._lock:
            if event.name:
                self._names[query_id] = event.name
            self._running[query_id] = True
        label = self._label(query_id, event.name)
        self._metrics.set_query_up(label, True)
        _log.info("query_started", query=label, run_id=str(event.runId))

    def onQueryProgress(self, event: QueryProgressEvent) -> None:  # noqa: N802
        """Publish state per view, the step duration and the input lag of one step."""
        progress = event.progress
        query_id = str(progress.id)
        label = self._label(query_id, progress.name)
        with self._lock:
            repeated = self._last_batch.get(query_id) == progress.batchId
            self._last_batch[query_id] = progress.batchId
        trigger_ms = progress.durationMs.get("triggerExecution")
        if self._observe_steps and trigger_ms is not None and not repeated:
            self._metrics.observe_step(trigger_ms / 1000.0)
        views = self._views_of(query_id, progress.name)
        state: dict[str, tuple[int, int]] = {}
        for index, operator in enumerate(progress.stateOperators):
            view = views[index] if index < len(views) else None
            if view is None:
                continue
            rows, size = state.get(view, (0, 0))
            state[view] = (rows + int(operator.numRowsTotal), size + int(operator.memoryUsedBytes))
        for view, (rows, size) in state.items():
            self._metrics.set_state(view, rows, size)
        if len(progress.stateOperators) > len(views):
            _log.debug(
                "state_operators_unmapped", query=label,
                operators=len(progress.stateOperators), mapped=len(views),
            )
        if not repeated:
            for source in progress.sources:
                self._count_skipped(label, source.startOffset, source.endOffset)
        topic = self._query_topics.get(query_id) or self._query_topics.get(progress.name or "")
        offsets: dict[str, dict[str, int]] = {}
        for source in progress.sources:
            offsets.update(parse_end_offsets(source.endOffset, topic))
        if self._stall is not None:
            self._stall.step_finished(label, offsets)
        if self._lag_probe is not None and offsets:
            self._lag_probe.observe(offsets)

    def _count_skipped(self, label: str, start_json: str | None, end_json: str | None) -> None:
        """Count and log the offsets a step skipped (``fail_on_data_loss`` off): its end
        offset's ``from`` (where it read a partition from) minus its start offset."""
        try:
            start, end = json.loads(start_json or "null"), json.loads(end_json or "null")
        except ValueError:
            return
        if not (isinstance(start, dict) and isinstance(end, dict) and end.get("from")):
            return
        before = _partition_offsets(start.get("partitions"))
        for p, first in _partition_offsets(end["from"]).items():
            skipped = first - before.get(p, first)
            if skipped > 0:
                topic = str(end.get("topic"))
                self._metrics.add_skipped_offsets(topic, skipped)
                _log.warning(
                    "input.offsets_skipped", query=label, topic=topic, partition=int(p),
                    first=before[p], last=first - 1, skipped=skipped,
                    reason="deleted before read (retention); TIDEMARK_FAIL_ON_DATA_LOSS=false",
                )

    def onQueryIdle(self, event: QueryIdleEvent) -> None:  # noqa: N802
        """Nothing to publish: an idle query keeps its last values."""

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:  # noqa: N802
        """Mark the query down; a termination with an exception is logged as an error."""
        query_id = str(event.id)
        with self._lock:
            self._running[query_id] = False
        label = self._label(query_id, None)
        self._metrics.set_query_up(label, False)
        if self._stall is not None:
            self._stall.query_stopped(label)
        if event.exception:
            _log.error("query_failed", query=label, error=event.exception.splitlines()[0])
        else:
            _log.info("query_stopped", query=label)

    def _views_of(self, query_id: str, name: str | None) -> Sequence[str | None]:
        if callable(self._state_views):
            return self._state_views(query_id, name)
        found = self._state_views.get(query_id)
        if found is None and name is not None:
            found = self._state_views.get(name)
        return found if found is not None else ()
