"""Composed views (SPEC S18, S19, ADR 0023): generated stacks of views over views, on Spark
through stage boundaries, against the reference evaluator running the whole program at once.

:mod:`differential_composed` draws one program of many independent stacks over the same
tables (so Spark starts once), each of up to four views of any form over earlier views or
tables, kept only if it compiles and ``compose`` refuses nothing (what is skipped is counted
and printed). Each step is produced to the real broker and run with
``Service.start(once=True)``; the same rows go to the reference evaluator, per table in
(partition, offset) order. Compared:

- each table's dead letters by (partition, offset, reason, column), and its waterline after
  each step (S3-S6);
- the dead-letter topic of every stage boundary is empty (S19: a late row is routed once, by
  its table);
- per append output view, the multiset of values Spark wrote over the whole run equals the
  reference's (S8, S19); and, step by step, what Spark has written so far is contained in
  what the reference has written so far (S19: a composed view's rows may come steps later,
  never earlier). Output topics have one partition, so a step's records are the next
  ``StepReport.outputs`` of the topic;
- per updating output view (an aggregate without EMIT AFTER WATERMARK, a filter of one, an
  aggregate over one: changelog or upsert, S18), every record applies (a retraction or a
  tombstone takes back a row held; a changelog aggregate's ``ver`` counts each group's
  records from 0), the rows held after the run equal the reference's, and where no row of
  the view waits for a waterline, each step's records equal the reference's.

Views behind a boundary may write their last rows a step after the reference (ADR 0023), so
while Spark has written fewer rows of a view than the reference, the last step's
punctuation runs again (the reference writes nothing more).

A failure prints the differing views, the stacks that hold them and the steps; rerun one
seed with ``DIFFERENTIAL_SEED=<seed>``.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from differential_cases import Step
from differential_composed import Composed, ViewDraw, generate
from test_spark_vs_reference import Run, _oracle_step, _produce_step, _seeds

from app.circuit.reference import OutputRecord, Reference
from app.connectors.avro_codec import AvroCodec
from app.connectors.output_reader import OutputReader
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.program.stages import Composition
from app.runtime.planner.compose import compose
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e


def _frozen(value: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((value or {}).items()))


class ComposedRun(Run):
    """Both sides' observations of one generated program: :class:`Run`'s, and per step the
    reports, the time taken and how the planner split the program."""

    def __init__(self, scenario: Composed, circuit: Any, topics: dict[str, str],
                 kafka_conf: dict[str, str]) -> None:
        super().__init__(scenario, circuit, topics, kafka_conf)  # type: ignore[arg-type]
        self.scenario: Composed = scenario  # type: ignore[assignment]  # Run's, drawn here
        #: Per step, the reports the step's run added.
        self.step_reports: list[list[StepReport]] = []
        self.prefix = ""
        self.composition = Composition()
        self.queries = 0
        self.seconds: list[float] = []
        #: Steps that repeated the last one's punctuation (:meth:`Composed.flush_step`).
        self.flushes = 0


#: At most this many steps after the last (one per stage behind a boundary would do).
MAX_FLUSH_STEPS = 4


def run_composed(scenario: Composed, kafka: Any, unique_topic: Any, tmp_path: Path) -> ComposedRun:
    tag = unique_topic("c")
    topics = {name: f"{tag}.{name}" for name in scenario.topic_names()}
    for table in scenario.lateness_s:
        kafka.create_topic(topics[table], partitions=2)
    for view in scenario.outputs:
        kafka.create_topic(topics[view], partitions=1)
    program = tmp_path / f"composed_{scenario.seed}.sql"
    program.write_text(scenario.program(topics))
    circuit = compile_program(program)
    run = ComposedRun(scenario, circuit, topics, kafka.conf())
    codecs = {t.name: AvroCodec(t.avro_schema) for t in circuit.tables}
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "log_level": 3})
    service = Service(circuit, kafka.settings(tmp_path / "ck", shuffle_partitions=2),
                      on_step=run.reports.append)
    reference = Reference(circuit)

    def run_step(step: Step) -> None:
        started = time.monotonic()
        seen = len(run.reports)
        placed = _produce_step(producer, topics, step, codecs)
        run.placed.append(placed)
        run.oracle.append(reference.step(_oracle_step(placed)))
        service.start(once=True)
        service.wait(timeout_seconds=600)
        run.step_reports.append(run.reports[seen:])
        run.seconds.append(time.monotonic() - started)

    def behind(view: str) -> bool:
        """Whether Spark has not yet written all the reference has: fewer rows of an append
        view, another net state of an updating one."""
        if scenario.view(view).fmt == "append":
            return (sum(r.outputs.get(view, 0) for r in run.reports)
                    < sum(len(result.outputs[view]) for result in run.oracle))
        fmt = scenario.view(view).fmt
        spark = [_change(fmt, k, v) for k, v in spark_records(run, view)]
        oracle = [_change(fmt, r.key, r.value) for result in run.oracle
                  for r in result.outputs[view]]
        return net_state(fmt, spark)[0] != net_state(fmt, oracle)[0]

    for step in scenario.steps:
        run_step(step)
    # Views behind a boundary may write their last rows steps later (S19): repeat the last
    # step's punctuation while Spark has written less of a view than the reference.
    while run.flushes < MAX_FLUSH_STEPS and any(behind(v) for v in scenario.outputs):
        run.flushes += 1
        run_step(scenario.flush_step())
    run.prefix = (tmp_path / "ck" / "stage-prefix").read_text(encoding="utf-8").strip()
    composed = compose(circuit, run.prefix)
    run.composition = composed.composition
    run.queries = len(composed.physical.queries)
    return run


# --- comparing ----------------------------------------------------------------------------------


def compare_tables(run: ComposedRun) -> list[str]:
    """Dead letters and waterlines of the program's tables; boundaries' dead letters."""
    problems: list[str] = []
    for table in run.scenario.lateness_s:
        expected: Counter[tuple[Any, ...]] = Counter()
        for result in run.oracle:
            for dead in result.dead_letters:
                if dead.table == table:
                    expected[(dead.row["_p"], dead.row["_o"], dead.reason, dead.column)] += 1
        actual: Counter[tuple[Any, ...]] = Counter()
        for msg in read_topic(run.kafka_conf, run.topics[table + ".dlq"]):
            h = {k: v.decode() for k, v in msg.headers()}
            actual[(int(h["tidemark.source.partition"]), int(h["tidemark.source.offset"]),
                    h["tidemark.error.reason"], h.get("tidemark.late.column"))] += 1
        if actual != expected:
            problems.append(f"{table} dead letters: missing {sorted(expected - actual)}, "
                            f"extra {sorted(actual - expected)}")
        oracle_w = [r.waterlines[table]["ts"] for r in run.oracle]
        spark_w = [[r.waterlines.get("ts") for r in reports if r.table == table
                    and r.step is not None][-1:] for reports in run.step_reports]
        if [w[0] if w else None for w in spark_w] != oracle_w:
            problems.append(f"{table} waterlines: spark {spark_w} != oracle {oracle_w}")
    for boundary in sorted(run.composition.boundaries):
        internal = read_topic(run.kafka_conf, f"{run.composition.topic(boundary)}.dlq")
        if internal:
            problems.append(f"boundary {boundary}: {len(internal)} dead letters")
    return problems


def spark_records(run: ComposedRun, view: str) -> list[tuple[Any, Any]]:
    """``view``'s records in its one-partition topic, in offset order: decoded (key, value),
    None for a null key or an upsert tombstone."""
    output = run.circuit.view(view).output
    assert output is not None
    reader = OutputReader(view, output)
    return [(reader.key(m.key()) if m.key() is not None else None,
             reader.value(m.value()) if m.value() is not None else None)
            for m in read_topic(run.kafka_conf, run.topics[view])]


#: What a changelog value adds to the view's row (S13); ``ptime`` is Spark's batch time, not
#: the reference's step clock, so it is not compared.
CHANGELOG_COLUMNS = ("undo", "ptime", "ver")


def _change(fmt: str, key: Mapping[str, Any] | None,
            value: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """One record of an updating view as compared: a changelog record's (undo, ver, row),
    an upsert's (key, row or None for a tombstone)."""
    if fmt == "changelog":
        assert value is not None
        row = {c: v for c, v in value.items() if c not in CHANGELOG_COLUMNS}
        return (bool(value["undo"]), int(value["ver"]), _frozen(row))
    return (_frozen(key), None if value is None else _frozen(value))


def net_state(fmt: str, changes: list[tuple[Any, ...]]) -> tuple[Counter[Any], list[str]]:
    """The rows an updating view holds after ``changes`` (S18: what a reader sees), and
    what does not apply: a retraction of a row not held, a tombstone of a key not held."""
    held: Counter[Any] = Counter()
    wrong: list[str] = []
    keyed: dict[Any, Any] = {}
    for change in changes:
        if fmt == "changelog":
            undo, _, row = change
            if undo:
                if held[row] <= 0:
                    wrong.append(f"retraction of a row not held: {row}")
                held[row] -= 1
                if held[row] == 0:
                    del held[row]
            else:
                held[row] += 1
        else:
            key, row = change
            if row is None and key not in keyed:
                wrong.append(f"tombstone of a key not held: {key}")
            if row is None:
                keyed.pop(key, None)
            else:
                keyed[key] = row
    if fmt != "changelog":
        held = Counter(keyed.items())
    return held, wrong


def _applied(draw: ViewDraw, steps: list[list[tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
    """Each step's changes in the order they must apply: as written, but for a view of a
    regular join's pairs of updating rows, whose step may retract a pair before inserting it
    (S16, S18; its sum after the step is a relation), each step's insertions first."""
    if not draw.rel.paired:
        return [change for step in steps for change in step]
    return [change for step in steps for change in sorted(step, key=lambda c: bool(c[0]))]


def compare_updating(run: ComposedRun, view: str) -> tuple[list[str], int, int]:
    """An updating view (S18, S13): what Spark wrote must apply (every retraction or
    tombstone takes back a row it holds, a changelog aggregate's ``ver`` counts each group's
    records from 0) and hold, after the run, the reference's rows. A view none of whose rows
    waits for a waterline (no AFTER WATERMARK window or LEFT join in it or behind it) is
    written in the step its input arrives, through every boundary (ADR 0023: ``--once``
    runs the stages in order), so there each step's records must equal the reference's, the
    sequence of changes per key. Problems, records compared, steps behind."""
    draw = run.scenario.view(view)
    fmt = draw.fmt
    written = [_change(fmt, k, v) for k, v in spark_records(run, view)]
    spark: list[list[tuple[Any, ...]]] = []
    position = 0
    for reports in run.step_reports:
        count = sum(r.outputs.get(view, 0) for r in reports)
        spark.append(written[position:position + count])
        position += count
    problems: list[str] = []
    if position != len(written):
        problems.append(f"{len(written) - position} records in the topic beyond the steps' "
                        "reported outputs")
        spark.append(written[position:])
    records: list[list[OutputRecord]] = [list(result.outputs[view]) for result in run.oracle]
    oracle = [[_change(fmt, r.key, r.value) for r in step] for step in records]
    while len(oracle) < len(spark):
        oracle.append([])
    spark_state, wrong = net_state(fmt, _applied(draw, spark))
    oracle_state, oracle_wrong = net_state(fmt, _applied(draw, oracle))
    problems += [f"spark: {w}" for w in wrong[:3]] + [f"reference: {w}" for w in oracle_wrong[:3]]
    if fmt == "changelog" and draw.form == "group":
        # Each group's records count from 0; a group whose rows were all taken back is
        # deleted (its row retracted, its state freed), and a later row starts it at 0
        # again (docs/semantics.md). Where Spark's steps coalesce changes otherwise than the
        # reference's, a group may empty at a step's end in one and not in the other.
        vers: dict[Any, int] = {}
        holding: dict[Any, bool] = {}
        for (_, value), change in zip(spark_records(run, view), written, strict=True):
            group = _frozen({c: value[c] for c in run.circuit.view(view).output.key_columns})
            restart = change[1] == 0 and not holding.get(group, False)
            if change[1] != vers.get(group, 0) and not restart:
                problems.append(f"ver {change[1]} of group {group}, {vers.get(group, 0)} due")
                break
            vers[group] = change[1] + 1
            holding[group] = not change[0]
    if spark_state != oracle_state:
        problems.append(f"rows held after the run: missing "
                        f"{sorted(oracle_state - spark_state)[:4]}, extra "
                        f"{sorted(spark_state - oracle_state)[:4]}")
    lag = 0
    if not draw.rel.gated:
        for index, (got, want) in enumerate(zip(spark, oracle, strict=True), 1):
            if Counter(got) != Counter(want):
                problems.append(f"step {index}: spark wrote {sorted(got, key=repr)[:6]}, "
                                f"the reference {sorted(want, key=repr)[:6]}")
                break
    else:
        last = [max((i for i, step in enumerate(side) if step), default=0)
                for side in (spark, oracle)]
        lag = last[0] - last[1]
    return problems, sum(map(len, oracle)), lag


def spark_per_step(run: ComposedRun, view: str) -> list[Counter[Any]]:
    """The values of ``view`` each step wrote: its one-partition topic in offset order, cut
    by the steps' reported output counts."""
    output = run.circuit.view(view).output
    assert output is not None
    codec = AvroCodec(output.value_schema)
    values = [_frozen(codec.decode(m.value())) for m in read_topic(run.kafka_conf,
                                                                    run.topics[view])]
    per_step: list[Counter[Any]] = []
    position = 0
    for reports in run.step_reports:
        count = sum(r.outputs.get(view, 0) for r in reports)
        per_step.append(Counter(values[position:position + count]))
        position += count
    if position != len(values):  # more records than the steps reported: count them last
        per_step.append(Counter(values[position:]))
    return per_step


def compare_view(run: ComposedRun, view: str) -> tuple[list[str], int, int]:
    """Problems, rows compared, and how many steps the latest row came after the
    reference's."""
    spark = spark_per_step(run, view)
    oracle = [Counter(_frozen(r.value) for r in result.outputs[view]) for result in run.oracle]
    problems: list[str] = []
    if len(spark) > len(oracle):
        problems.append(f"{sum(spark[-1].values())} records in the topic beyond the "
                        "steps' reported outputs")
        oracle.append(Counter())
    total_spark, total_oracle = sum(spark, Counter()), sum(oracle, Counter())
    if total_spark != total_oracle:
        problems.append(f"values: missing {sorted(total_oracle - total_spark)[:6]}, "
                        f"extra {sorted(total_spark - total_oracle)[:6]} "
                        f"(spark {sum(total_spark.values())}, "
                        f"reference {sum(total_oracle.values())} rows)")
    # Each value's k-th row Spark wrote against the reference's k-th: never earlier (S19).
    steps_spark: dict[Any, list[int]] = {}
    steps_oracle: dict[Any, list[int]] = {}
    for into, counted in ((steps_spark, spark), (steps_oracle, oracle)):
        for index, values in enumerate(counted):
            for value, n in values.items():
                into.setdefault(value, []).extend([index] * n)
    lag = 0
    early: list[tuple[int, int, Any]] = []
    for value, wanted in steps_oracle.items():
        for want, got in zip(wanted, steps_spark.get(value, []), strict=False):
            lag = max(lag, got - want)
            if got < want:
                early.append((got + 1, want + 1, value))
    if early:
        problems.append(f"{len(early)} rows written before the reference's step "
                        f"(spark step, reference step, row): {sorted(early)[:4]}")
    return problems, sum(total_oracle.values()), lag


def compare(run: ComposedRun) -> tuple[dict[str, list[str]], dict[str, Any]]:
    found: dict[str, list[str]] = {}
    tables = compare_tables(run)
    if tables:
        found["<tables>"] = tables
    rows = 0
    lags: Counter[int] = Counter()
    for view in run.scenario.outputs:
        if run.scenario.view(view).fmt == "append":
            problems, count, lag = compare_view(run, view)
        else:
            problems, count, lag = compare_updating(run, view)
        rows += count
        lags[lag] += 1
        if problems:
            found[view] = problems
    stats = {"rows": rows, "lags": dict(sorted(lags.items()))}
    return found, stats


def summary(run: ComposedRun, stats: dict[str, Any]) -> str:
    scenario = run.scenario
    stages = Counter(run.composition.stage(v) for v in scenario.outputs)
    return (
        f"seed {scenario.seed}: {len(scenario.stacks)} stacks ({scenario.drawn} drawn, "
        f"skipped {dict(scenario.skipped)}), {len(scenario.views)} views "
        f"{dict(scenario.forms)}, {scenario.compositions} compositions, "
        f"{len(scenario.outputs)} outputs by stage {dict(sorted(stages.items()))}, "
        f"{len(run.composition.boundaries)} boundaries, {run.queries} queries, "
        f"{stats['rows']} reference rows, "
        f"outputs by steps behind {stats['lags']}, {len(run.seconds)} steps "
        f"({run.flushes} repeating the last) {[round(s) for s in run.seconds]} s"
    )


def check(seed: int, compositions: int, kafka: Any, unique_topic: Any,
          tmp_path: Path, steps: int = 2) -> ComposedRun:
    started = time.monotonic()
    scenario = generate(seed, compositions, steps=steps)
    drawn_s = time.monotonic() - started
    run = run_composed(scenario, kafka, unique_topic, tmp_path)
    found, stats = compare(run)
    print(f"\n{summary(run, stats)}; drawing {drawn_s:.0f} s, "
          f"all {time.monotonic() - started:.0f} s")
    if found:
        details = "\n".join(f"{name}: {p}" for name, ps in found.items() for p in ps[:4])
        pytest.fail(f"{len(found)} of {len(scenario.outputs)} output views differ "
                    f"(seed {seed}):\n{details}\n\n{scenario.describe(set(found))}",
                    pytrace=False)
    return run


CI_COMPOSITIONS = int(os.environ.get("DIFFERENTIAL_COMPOSITIONS", "40"))


@pytest.mark.parametrize("seed", _seeds([20261201]))
def test_composed_views_equal_reference_s19(
    seed: int, kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """40 or more generated compositions in one program over two tables, one step of rows,
    then a step of late rows and the punctuation that closes every window (each step starts
    every query of the program, so CI's time is the steps')."""
    check(seed, CI_COMPOSITIONS, kafka, unique_topic, tmp_path, steps=1)


LONG_SEEDS = [int(s) for s in os.environ.get(
    "DIFFERENTIAL_COMPOSED_SEEDS", "1,2,3,4,5,6,7,8,9,10").split(",")]
LONG_COMPOSITIONS = int(os.environ.get("DIFFERENTIAL_LONG_COMPOSITIONS", "50"))


@pytest.mark.slow
@pytest.mark.parametrize("seed", _seeds(LONG_SEEDS))
def test_composed_views_equal_reference_long_run(
    seed: int, kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """The longer run of docs/differential.md: 10 seeds x 50 or more compositions
    (``DIFFERENTIAL_COMPOSED_SEEDS``), three steps of rows each, then the last step."""
    check(seed, LONG_COMPOSITIONS, kafka, unique_topic, tmp_path, steps=3)
