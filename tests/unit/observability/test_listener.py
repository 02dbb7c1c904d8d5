"""TidemarkQueryListener over Spark's own event classes, built from the JSON Spark reports."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from pyspark.sql.streaming.listener import (
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
)

from app.observability.listener import StepStall, TidemarkQueryListener, parse_end_offsets
from app.observability.metrics import TidemarkMetrics

QUERY_ID = "2f1cf2b0-8d62-4b4e-9a4e-3c1d0e5a7b11"
RUN_ID = "5b9e1c77-2f0a-4c1e-8f43-0d2a61c5e0aa"


def state_operator(rows: int, size: int) -> dict[str, Any]:
    return {
        "operatorName": "stateStoreSave", "numRowsTotal": rows, "numRowsUpdated": 1,
        "allUpdatesTimeMs": 1, "numRowsRemoved": 0, "allRemovalsTimeMs": 0, "commitTimeMs": 3,
        "memoryUsedBytes": size, "numRowsDroppedByWatermark": 0, "numShufflePartitions": 2,
        "numStateStoreInstances": 2, "customMetrics": {},
    }


def progress(batch_id: int, trigger_ms: int, operators: list[dict[str, Any]],
             end_offset: str = '{"purchases": {"0": 10}}', name: str | None = "purchase",
             ) -> QueryProgressEvent:
    return QueryProgressEvent.fromJson({"progress": {
        "id": QUERY_ID, "runId": RUN_ID, "name": name,
        "timestamp": "2026-11-20T10:00:00.000Z", "batchId": batch_id, "batchDuration": trigger_ms,
        "durationMs": {"triggerExecution": trigger_ms, "addBatch": trigger_ms - 10},
        "eventTime": {"watermark": "1970-01-01T00:00:00.000Z"},
        "stateOperators": operators,
        "sources": [{
            "description": "tidemark-kafka", "startOffset": None, "endOffset": end_offset,
            "latestOffset": None, "numInputRows": 10, "inputRowsPerSecond": 1.0,
            "processedRowsPerSecond": 1.0, "metrics": {},
        }],
        "sink": {"description": "ForeachBatchSink", "numOutputRows": -1, "metrics": {}},
        "numInputRows": 10, "inputRowsPerSecond": 1.0, "processedRowsPerSecond": 1.0,
        "observedMetrics": {},
    }})


def started(name: str | None = "purchase") -> QueryStartedEvent:
    return QueryStartedEvent.fromJson({
        "id": QUERY_ID, "runId": RUN_ID, "name": name,
        "timestamp": "2026-11-20T10:00:00.000Z", "jobTags": [],
    })


def terminated(exception: str | None = None) -> QueryTerminatedEvent:
    return QueryTerminatedEvent.fromJson({
        "id": QUERY_ID, "runId": RUN_ID, "exception": exception,
        "errorClassOnException": None,
    })


def value(m: TidemarkMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_s11_state_of_each_operator_is_reported_under_its_view_name() -> None:
    m = TidemarkMetrics()
    listener = TidemarkQueryListener(m, {"purchase": [None, "per_minute", "per_card", "per_card"]})
    listener.onQueryProgress(progress(3, 250, [
        state_operator(100, 9_000),   # the late gate: not a view's state
        state_operator(12, 4_096),
        state_operator(5, 1_000),
        state_operator(7, 2_000),     # a view with two stateful operators: summed
    ]))
    assert value(m, "tidemark_state_rows", view="per_minute") == 12
    assert value(m, "tidemark_state_bytes", view="per_minute") == 4096
    assert value(m, "tidemark_state_rows", view="per_card") == 12
    assert value(m, "tidemark_state_bytes", view="per_card") == 3000
    assert {s.labels["view"] for f in m.registry.collect() if f.name == "tidemark_state_rows"
            for s in f.samples} == {"per_minute", "per_card"}


def test_state_views_may_be_keyed_by_query_id_or_given_as_a_callable() -> None:
    by_id = TidemarkMetrics()
    TidemarkQueryListener(by_id, {QUERY_ID: ["v"]}).onQueryProgress(
        progress(0, 100, [state_operator(3, 30)], name=None))
    assert value(by_id, "tidemark_state_rows", view="v") == 3
    asked: list[tuple[str, str | None]] = []

    def views(query_id: str, name: str | None) -> list[str | None]:
        asked.append((query_id, name))
        return ["w"]

    by_callable = TidemarkMetrics()
    TidemarkQueryListener(by_callable, views).onQueryProgress(
        progress(0, 100, [state_operator(4, 40)]))
    assert value(by_callable, "tidemark_state_rows", view="w") == 4
    assert asked == [(QUERY_ID, "purchase")]


def test_s1_step_duration_is_observed_once_per_step() -> None:
    m = TidemarkMetrics()
    listener = TidemarkQueryListener(m)
    listener.onQueryProgress(progress(0, 5_600, []))
    listener.onQueryProgress(progress(1, 90, []))
    listener.onQueryProgress(progress(1, 90, []))  # the same batch reported again
    assert value(m, "tidemark_step_duration_seconds_count") == 2
    assert value(m, "tidemark_step_duration_seconds_sum") == pytest.approx(5.69)


def test_query_up_follows_started_and_terminated_events() -> None:
    m = TidemarkMetrics()
    listener = TidemarkQueryListener(m)
    assert not listener.queries_running()
    listener.onQueryStarted(started())
    assert listener.queries_running()
    assert value(m, "tidemark_query_up", query="purchase") == 1
    listener.onQueryTerminated(terminated("java.lang.IllegalStateException: boom\n\tat x"))
    assert not listener.queries_running()
    assert value(m, "tidemark_query_up", query="purchase") == 0


def test_an_unnamed_query_is_labelled_by_its_id() -> None:
    m = TidemarkMetrics()
    listener = TidemarkQueryListener(m)
    listener.onQueryStarted(started(name=None))
    assert value(m, "tidemark_query_up", query=str(uuid.UUID(QUERY_ID))) == 1


def test_end_offsets_of_the_tidemark_source_shape_are_parsed_and_others_ignored() -> None:
    assert parse_end_offsets(json.dumps({"purchases": {"0": 10, "1": 7}, "bids": {"2": 0}})) == {
        "purchases": {"0": 10, "1": 7}, "bids": {"2": 0}}
    assert parse_end_offsets('{"offset": 5}') == {}           # e.g. a rate source
    assert parse_end_offsets("17") == {}
    assert parse_end_offsets("not json") == {}
    assert parse_end_offsets(None) == {}
    assert parse_end_offsets('{"t": {"0": "x", "1": 3, "x": 4}}') == {"t": {"1": 3}}


def test_end_offsets_of_tidemark_kafka_source_need_the_query_topic() -> None:
    own = json.dumps({"partitions": {"0": 12, "1": 9}, "step": 4, "wall_clock_ms": 1})
    assert parse_end_offsets(own, "purchases") == {"purchases": {"0": 12, "1": 9}}
    assert parse_end_offsets(own) == {}


def test_step_duration_can_be_left_to_the_caller() -> None:
    m = TidemarkMetrics()
    TidemarkQueryListener(m, observe_step_duration=False).onQueryProgress(progress(0, 90, []))
    assert value(m, "tidemark_step_duration_seconds_count") == 0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_liveness_fails_when_no_step_finished_within_the_stall_while_input_waits() -> None:
    """A hung step: the last step finished 600 s ago and records wait beyond what it read."""
    clock = FakeClock()
    high = {"purchases": 10}
    asked: list[object] = []

    def lags(offsets: object) -> dict[tuple[str, int], int]:
        asked.append(offsets)
        return {("purchases", 0): high["purchases"] - 10}

    stall = StepStall(600, lags, clock=clock)
    listener = TidemarkQueryListener(TidemarkMetrics(), stall=stall)
    assert stall() == (True, "ok")  # no step yet: the startup probe's concern
    listener.onQueryProgress(progress(0, 90, []))
    clock.now += 599
    high["purchases"] = 25
    assert stall() == (True, "ok") and not asked  # within the stall: the broker is not asked
    clock.now += 1
    alive, reason = stall()
    assert not alive
    assert reason == "query purchase: no step finished for 600 s while 15 records wait"
    assert asked == [{"purchases": {"0": 10}}]
    listener.onQueryProgress(progress(1, 90, [], end_offset='{"purchases": {"0": 25}}'))
    assert stall() == (True, "ok")


def test_liveness_holds_while_idle_or_when_the_broker_does_not_answer() -> None:
    clock = FakeClock()
    answer: dict[tuple[str, int], int] = {("purchases", 0): 0}
    stall = StepStall(600, lambda offsets: answer, clock=clock)
    listener = TidemarkQueryListener(TidemarkMetrics(), stall=stall)
    listener.onQueryStarted(started())
    listener.onQueryProgress(progress(0, 90, []))
    clock.now += 3600
    assert stall() == (True, "ok")  # idle for an hour: nothing waits
    answer = {}  # the probe failed (it logs why): unknown is not a stall
    assert stall() == (True, "ok")
    answer = {("purchases", 0): 3}
    assert not stall()[0]
    listener.onQueryTerminated(terminated())  # a stopped query is readiness' concern
    assert stall() == (True, "ok")
    assert StepStall(0, lambda offsets: answer, clock=clock)() == (True, "ok")

