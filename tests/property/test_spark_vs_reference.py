"""Differential tests: the Spark runtime equals the reference evaluator record for record (S3-S14).

A seeded generator (:mod:`differential_cases`) writes a program of two tables and many
aggregate views (the cases: TUMBLE/HOP/unwindowed, every aggregate of L3, WHERE/HAVING, every
EMIT form and format the Spark runtime runs) and the steps of input (out of order, late rows,
rows equal to the waterline, NULLs, many keys, punctuations, malformed records). Each step is
produced to the real broker and run with ``Service.start(once=True)``; the same rows go to
:func:`app.circuit.reference.Reference.step`, per table in (partition, offset) order. Then every
record both wrote is compared:

- dead letters by (partition, offset, reason, column) (S5-S7);
- table waterlines after each data step (S3, S4);
- upsert: the final table per key and the sequence of values per key (S12, S13);
- changelog: the full (undo, values, ver) sequence per group (``ptime`` differs by design:
  Spark's batch time, not the oracle's);
- append: the multiset of values;
- the ``tidemark.waterline`` header of every record against the oracle's view waterline (S14);
  AFTER WATERMARK rows may be written one step later (Spark's no-data step), so their header
  may also be the next step's waterline.

A failure prints the seed, the program and the steps; rerun one seed with
``DIFFERENTIAL_SEED=<seed>``.
"""

from __future__ import annotations

import math
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from differential_cases import Case, Scenario, generate
from spark_offset_log import spark_batches

from app.circuit.ir import Circuit
from app.circuit.processing_time import attribute_is_processing_time
from app.circuit.reference import Punctuation, Reference, StepInput, StepResult
from app.circuit.waterline import derived_waterline
from app.connectors.avro_codec import AvroCodec
from app.connectors.sink import format_time_value
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.program.stages import attribute_steps
from app.runtime.operators.arrow_views import slice_computable
from app.runtime.planner.physical import per_step_views, physical_plan
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e

Mismatches = list[str]
NO_HEADER = "<no header>"


# --- running both sides -----------------------------------------------------------------------


def _produce_step(producer: Any, topics: Mapping[str, str], scenario_step: Any,
                  codecs: Mapping[str, AvroCodec]) -> dict[str, list[tuple[int, int, str, Any]]]:
    """Produce one step; return per table its records with their (partition, offset)."""
    placed: dict[str, list[tuple[int, int, str, Any]]] = {}
    for table, records in scenario_step.records.items():
        delivered: list[tuple[int, int, str, Any]] = []

        def on_delivery(err: Any, msg: Any, kind: str = "", payload: Any = None,
                        into: list[tuple[int, int, str, Any]] = delivered) -> None:
            assert err is None, err
            into.append((msg.partition(), msg.offset(), kind, payload))

        for partition, kind, payload in records:
            callback = _bind(on_delivery, kind, payload)
            if kind == "row":
                producer.produce(topics[table], value=codecs[table].encode(payload),
                                 partition=partition, on_delivery=callback)
            elif kind == "malformed":
                producer.produce(topics[table], value=payload, partition=partition,
                                 on_delivery=callback)
            else:
                producer.produce(topics[table], value=None, partition=partition,
                                 headers=[("tidemark.bound", str(payload).encode())],
                                 on_delivery=callback)
            producer.poll(0)
        assert producer.flush(30) == 0
        placed[table] = sorted(delivered, key=lambda r: (r[0], r[1]))
    return placed


def _bind(callback: Callable[..., None], kind: str, payload: Any) -> Callable[[Any, Any], None]:
    return lambda err, msg: callback(err, msg, kind, payload)


def _oracle_step(placed: Mapping[str, list[tuple[int, int, str, Any]]]) -> StepInput:
    rows: dict[str, list[dict[str, Any]]] = {}
    marks: dict[str, list[Punctuation]] = {}
    for table, records in placed.items():
        rows[table] = [{**payload, "_p": p, "_o": o}
                       for p, o, kind, payload in records if kind == "row"]
        marks[table] = [Punctuation(payload) for _, _, kind, payload in records
                        if kind == "punctuation"]
    return StepInput(rows=rows, punctuations=marks)


class Run:
    """Both sides' observations of one scenario."""

    def __init__(self, scenario: Scenario, circuit: Circuit, topics: dict[str, str],
                 kafka_conf: dict[str, str]) -> None:
        self.scenario = scenario
        self.topics = topics
        self.kafka_conf = kafka_conf
        self.circuit = circuit
        self.oracle: list[StepResult] = []
        self.placed: list[dict[str, list[tuple[int, int, str, Any]]]] = []
        self.reports: list[StepReport] = []
        self.checkpoint: Path | None = None


def run_scenario(
    scenario: Scenario,
    kafka: Any,
    unique_topic: Any,
    tmp_path: Path,
    single_partition_outputs: bool = False,
) -> Run:
    """``single_partition_outputs``: the cases' output topics get one partition (the service
    would give them the input's two), so a step's records follow the last step's in offset
    order (:func:`compare_step_headers`)."""
    tag = unique_topic("d")
    topics = {name: f"{tag}.{name}" for name in scenario.topic_names()}
    for table in scenario.lateness_s:
        kafka.create_topic(topics[table], partitions=2)
    if single_partition_outputs:
        for case in scenario.cases:
            kafka.create_topic(topics[case.name], partitions=1)
    program = tmp_path / f"differential_{scenario.seed}.sql"
    program.write_text(scenario.program(topics))
    circuit = compile_program(program)
    run = Run(scenario, circuit, topics, kafka.conf())
    run.checkpoint = tmp_path / "ck"
    codecs = {t.name: AvroCodec(t.avro_schema) for t in circuit.tables}
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "log_level": 3})
    service = Service(circuit, kafka.settings(tmp_path / "ck", shuffle_partitions=2),
                      on_step=run.reports.append)
    reference = Reference(circuit)
    for step in scenario.steps:
        placed = _produce_step(producer, topics, step, codecs)
        run.placed.append(placed)
        run.oracle.append(reference.step(_oracle_step(placed)))
        service.start(once=True)
        service.wait(timeout_seconds=300)
    return run


# --- comparing --------------------------------------------------------------------------------


def compare_step_headers(run: Run, views: Sequence[str]) -> Mismatches:
    """S14 step by step: every record a step wrote carries the waterline the step sink
    computed after that step. The output topics have one partition, so a step's records are
    the next ``report.outputs[view]`` of the topic, in step order. The view's waterline is
    its first time attribute's: of a view led by ``window_start``, S10's start waterline."""
    problems: Mismatches = []
    relations = {v.name: v for v in run.circuit.views}
    for name in views:
        table = run.circuit.root_table(name).name
        view = relations[name]
        first = view.time_attributes[0] if view.time_attributes else None
        steps = attribute_steps(relations, view, first) if first is not None else ()
        messages = list(read_topic(run.kafka_conf, run.topics[name]))
        assert {m.partition() for m in messages} <= {0}, "give the outputs one partition"
        position = 0
        for report in (r for r in run.reports if r.table == table):
            count = report.outputs.get(name, 0)
            want = format_time_value(derived_waterline(steps, report.waterlines.get("ts")), "ms")
            block = messages[position : position + count]
            position += count
            got = {dict(m.headers() or ()).get("tidemark.waterline", b"").decode() for m in block}
            if got - {want}:
                problems.append(f"{name} batch {report.batch_id}: headers {got} != {want}")
        if position != len(messages):
            problems.append(f"{name}: {len(messages)} records, the steps reported {position}")
    return problems


def processing_oracle(run: Run, table: str) -> Run:
    """The oracle of the views over a table with ``pt AS PROCTIME()``, whose values are batch
    times: a reference fed the steps that table's query ran (rows and punctuations by offset
    range, Spark's batch time from its offset log, steps without input included), as a
    :class:`Run` of the same records. The table's query is its own (views read one table)."""
    assert run.checkpoint is not None
    records = sorted(r for placed in run.placed for r in placed.get(table, ()))
    reference = Reference(run.circuit)
    oracle = Run(run.scenario, run.circuit, run.topics, run.kafka_conf)
    previous: dict[int, int] = {}
    for batch in spark_batches(run.checkpoint / table / "spark", written=set()):
        step = [r for r in records if previous.get(r[0], 0) <= r[1] < batch.ends.get(r[0], 0)]
        rows = [{**payload, "_p": p, "_o": o} for p, o, kind, payload in step if kind == "row"]
        marks = [Punctuation(payload) for _, _, kind, payload in step if kind == "punctuation"]
        oracle.oracle.append(reference.step(StepInput(
            rows={table: rows}, punctuations={table: marks}, batch_time_ms=batch.time_ms)))
        previous = batch.ends
    return oracle


def _same(a: Any, b: Any) -> bool:
    """Equality, with a relative tolerance for floats (AVG; SUM of DOUBLE is exact here)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _sortable(value: Any) -> Any:
    if value is None:
        return (0, "")
    if isinstance(value, float):
        return (1, round(value, 6))
    if isinstance(value, Mapping):
        return tuple((k, _sortable(v)) for k, v in sorted(value.items()))
    return (1, value) if isinstance(value, int | bool) else (2, str(value))


def _hashable(mapping: Mapping[str, Any] | None) -> Any:
    return None if mapping is None else tuple(sorted(mapping.items()))


def compare_dead_letters(run: Run) -> Mismatches:
    problems: Mismatches = []
    topics = run.topics
    for table in run.scenario.lateness_s:
        expected: Counter[tuple[Any, ...]] = Counter()
        for placed, result in zip(run.placed, run.oracle, strict=True):
            for p, o, kind, _ in placed[table]:
                if kind == "malformed":
                    expected[(p, o, "malformed", None)] += 1
            for dead in result.dead_letters:
                if dead.table == table:
                    expected[(dead.row["_p"], dead.row["_o"], dead.reason, dead.column)] += 1
        actual: Counter[tuple[Any, ...]] = Counter()
        for msg in read_topic(run.kafka_conf, topics[table + ".dlq"]):
            h = {k: v.decode() for k, v in msg.headers()}
            actual[(int(h["tidemark.source.partition"]), int(h["tidemark.source.offset"]),
                    h["tidemark.error.reason"], h.get("tidemark.late.column"))] += 1
        if actual != expected:
            problems.append(f"{table} dead letters: missing {sorted(expected - actual)}, "
                            f"extra {sorted(actual - expected)}")
        oracle_w = [r.waterlines[table]["ts"] for r in run.oracle]
        spark_w = [r.waterlines.get("ts") for r in run.reports
                   if r.table == table and r.step is not None]
        if spark_w != oracle_w:
            problems.append(f"{table} waterlines: spark {spark_w} != oracle {oracle_w}")
    return problems


def compare_view(run: Run, case: Case) -> Mismatches:
    """Every record of one view, both sides (see the module docstring)."""
    view = run.circuit.view(case.name)
    out = view.output
    assert out is not None
    value_codec = AvroCodec(out.value_schema)
    after_watermark = view.emit.after_watermark
    event_time = [
        a for a in view.time_attributes if not attribute_is_processing_time(run.circuit, a)
    ]
    # Oracle records: (key, value without ptime, allowed waterline headers), in step order.
    oracle: list[tuple[Any, Any, set[str]]] = []
    for index, result in enumerate(run.oracle):
        later = run.oracle[index + 1].view_waterlines[case.name] if index + 1 < len(
            run.oracle) else result.view_waterlines[case.name]
        for record in result.outputs[case.name]:
            # S14: a view without an event-time attribute has no waterline, so no header.
            allowed = ({format_time_value(record.waterline, "ms")} if event_time
                       else {NO_HEADER})
            if after_watermark:
                allowed.add(format_time_value(later, "ms"))
            value = None if record.value is None else {
                k: v for k, v in record.value.items() if k != "ptime"}
            oracle.append((record.key, value, allowed))
    spark: list[tuple[Any, Any, str]] = []
    for msg in read_topic(run.kafka_conf, run.topics[case.name]):
        key = (AvroCodec(out.key_schema).decode(msg.key())
               if out.key_schema and msg.key() is not None else None)
        value = None if msg.value() is None else value_codec.decode(msg.value())
        if value is not None:
            value.pop("ptime", None)
        header = dict(msg.headers() or ()).get("tidemark.waterline", NO_HEADER.encode()).decode()
        spark.append((key, value, header))
    problems: Mismatches = []

    def group_of(key: Any, value: Any) -> Any:
        if out.format == "changelog":
            return tuple(value[c] for c in out.key_columns)
        return _hashable(key)

    # A stateless changelog view without a key has no groups: its records of a step come in
    # partition order, so they compare as a multiset, as append records do.
    if out.format == "append" or (view.is_stateless and not out.key_columns):
        want = sorted((v for _, v, _ in oracle), key=_sortable)
        got = sorted((v for _, v, _ in spark), key=_sortable)
        if not _same(want, got):
            problems.append(f"append multiset: oracle {want} != spark {got}")
        headers_ok = Counter(h for _, _, h in spark)
        allowed_all = set().union(*(a for _, _, a in oracle)) if oracle else set()
        if spark and not set(headers_ok) <= allowed_all:
            problems.append(f"waterline headers {dict(headers_ok)} not in {allowed_all}")
        return problems
    want_seq: dict[Any, list[tuple[Any, set[str]]]] = defaultdict(list)
    got_seq: dict[Any, list[tuple[Any, str]]] = defaultdict(list)
    for key, value, allowed in oracle:
        want_seq[group_of(key, value)].append((value, allowed))
    for key, value, header in spark:
        got_seq[group_of(key, value)].append((value, header))
    if out.format == "changelog":
        for seq in got_seq.values():
            seq.sort(key=lambda item: item[0]["ver"])
    for group in sorted(set(want_seq) | set(got_seq), key=repr):
        want = want_seq.get(group, [])
        got = got_seq.get(group, [])
        if not _same([v for v, _ in want], [v for v, _ in got]):
            problems.append(f"group {group}: oracle {[v for v, _ in want]} "
                            f"!= spark {[v for v, _ in got]}")
            continue
        bad = [(h, a) for (_, a), (_, h) in zip(want, got, strict=True) if h not in a]
        if bad:
            problems.append(f"group {group}: waterline headers {bad}")
    if out.format == "upsert":
        final_want = {g: s[-1][0] for g, s in want_seq.items() if s and s[-1][0] is not None}
        final_got = {g: s[-1][0] for g, s in got_seq.items() if s and s[-1][0] is not None}
        if not _same(final_want, final_got):
            problems.append("final upsert tables differ")
    return problems


def compare(run: Run) -> dict[str, Mismatches]:
    found: dict[str, Mismatches] = {}
    dead = compare_dead_letters(run)
    if dead:
        found["<tables>"] = dead
    # Views over a PROCTIME table: the oracle fed that table's query's steps and batch times.
    oracles = {table: processing_oracle(run, table) for table in run.scenario.proctime}

    def oracle_of(name: str) -> Run:
        if not oracles:
            return run
        try:
            root = run.circuit.root_table(name).name
        except ValueError:  # a UNION ALL or JOIN: no PROCTIME table's query alone
            return run
        return oracles.get(root, run)

    for name in run.scenario.stateless:
        fake = Case(name, "", "", "stateless", "append")
        problems = compare_view(oracle_of(name), fake)
        if problems:
            found[name] = problems
    for case in run.scenario.cases:
        problems = compare_view(oracle_of(case.name), case)
        if problems:
            found[case.name] = problems
    return found


def _check(
    scenario: Scenario,
    kafka: Any,
    unique_topic: Any,
    tmp_path: Path,
    single_partition_outputs: bool = False,
) -> Run:
    run = run_scenario(scenario, kafka, unique_topic, tmp_path, single_partition_outputs)
    found = compare(run)
    if found:
        details = "\n".join(f"{name}: {p}" for name, ps in found.items() for p in ps[:4])
        pytest.fail(f"{len(found)} of {len(scenario.cases)} cases differ "
                    f"(seed {scenario.seed}):\n{details}\n\n{scenario.describe()}",
                    pytrace=False)
    return run


def _seeds(default: Sequence[int]) -> list[int]:
    chosen = os.environ.get("DIFFERENTIAL_SEED")
    return [int(chosen)] if chosen else list(default)


CI_CASES = int(os.environ.get("DIFFERENTIAL_CASES", "52"))
#: CUMULATE aggregates (L4, S9) beside CI's generated views: each of their 9 EMIT forms/formats.
CI_CUMULATES = int(os.environ.get("DIFFERENTIAL_CUMULATES", "9"))
#: Aggregates by a derived time attribute (S10, S11) beside them: 3 by a derived key, 3 by a
#: window on a derived column of a local view.
CI_DERIVED = int(os.environ.get("DIFFERENTIAL_DERIVED", "6"))
#: Aggregates windowed on a PROCTIME column (seed 004), with two stateless views reading NOW().
CI_PROCTIMES = int(os.environ.get("DIFFERENTIAL_PROCTIMES", "3"))
#: OVER views (docs/semantics.md, ADR 0019) beside them.
CI_OVERS = int(os.environ.get("DIFFERENTIAL_OVERS", "5"))


@pytest.mark.slow  # ~4 min; CI compares generated programs in the composed differential
@pytest.mark.parametrize("seed", _seeds([20261121]))
def test_spark_equals_reference_on_generated_views_s3_s14(
    seed: int, kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """52 generated views over two tables in one Spark run of 4 steps: every record as the
    oracle's, punctuations (S4) and malformed records (S7) included; 9 CUMULATE aggregates
    and 6 aggregates by derived time attributes on the state operator; and a third table with
    ``pt AS PROCTIME()``: 3 aggregates windowed on it and two views of NOW(), as the oracle fed
    that table's steps and batch times; and 5 OVER views on the OVER operator."""
    scenario = generate(seed, cases=CI_CASES, steps=4, rows_per_step=18, cumulates=CI_CUMULATES,
                        derived=CI_DERIVED, proctimes=CI_PROCTIMES, overs=CI_OVERS)
    run = _check(scenario, kafka, unique_topic, tmp_path)
    cumulates = [sum(r.outputs.get(f"cu{i}", 0) for r in run.reports) for i in range(CI_CUMULATES)]
    assert all(n > 0 for n in cumulates), cumulates
    derived = [sum(r.outputs.get(f"dv{i}", 0) for r in run.reports) for i in range(CI_DERIVED)]
    assert all(n > 0 for n in derived), derived
    proctimes = [sum(r.outputs.get(f"pp{i}", 0) for r in run.reports) for i in range(CI_PROCTIMES)]
    assert all(n > 0 for n in proctimes), proctimes
    overs = [sum(r.outputs.get(f"ov{i}", 0) for r in run.reports) for i in range(CI_OVERS)]
    assert all(n > 0 for n in overs), overs


#: Cascades of windows (SPEC S18) and SESSION aggregates (L4) beside the native views of
#: CI's native run.
CI_CASCADES = 3
CI_SESSIONS = 11
#: Window Top-N views (ROW_NUMBER, RANK; ADR 0020) beside them.
CI_TOP_NS = 5


@pytest.mark.slow  # ~5 min; CI runs the native views of one job and the slice views
@pytest.mark.parametrize("seed", _seeds([20261122]))
def test_native_aggregation_equals_reference_s11_s12(
    seed: int, kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """20 windowed AFTER WATERMARK views with exactly computable aggregates, the views Spark's
    own aggregation runs (app/runtime/operators/native_aggregate.py): TUMBLE/HOP, offsets,
    WHERE/HAVING, every format, rows equal to the waterline and windows ending on it, record for
    record; 3 cascades of two or three such levels, each over the window end of the one below
    (S18), in ``ev_a``'s query; 11 SESSION aggregates (Spark's session_window), sessions
    per drawn keys; and 5 window Top-N views (ADR 0020), over a window function's rows or
    an aggregate's final rows.
    Both tables' queries write their records themselves (ADR 0008), after a job over the
    step's slices (their queries read the source once per view): ``ev_a`` beside stateless
    views its source tasks compute (dead letters written with them), ``ev_b`` alone (dead
    letters written by that first job). Each step's records carry that step's waterline."""
    scenario = generate(
        seed,
        cases=20,
        steps=4,
        rows_per_step=18,
        native=True,
        slice_views=True,
        bare=("ev_b",),
        cascades=CI_CASCADES,
        sessions=CI_SESSIONS,
        top_ns=CI_TOP_NS,
    )
    run = _check(scenario, kafka, unique_topic, tmp_path, single_partition_outputs=True)
    circuit = run.circuit
    cascaded = {n: sum(r.outputs.get(n, 0) for r in run.reports) for n in scenario.stateless}
    assert all(cascaded[f"cs{i}"] > 0 for i in range(CI_CASCADES)), cascaded
    sessions = [sum(r.outputs.get(f"se{i}", 0) for r in run.reports) for i in range(CI_SESSIONS)]
    assert sum(n > 0 for n in sessions) >= CI_SESSIONS // 2, sessions
    top_ns = [cascaded[f"tn{i}"] for i in range(CI_TOP_NS)]
    assert sum(n > 0 for n in top_ns) >= CI_TOP_NS // 2, top_ns
    stages = {q.tables[0]: q.writing_stage for q in physical_plan(circuit).queries}
    assert stages == {"ev_a": "aggregate", "ev_b": "aggregate"}
    assert compare_step_headers(run, [c.name for c in scenario.cases]) == []
    assert sum(r.outputs.get("sa_chain", 0) for r in run.reports) > 0
    for table in ("ev_a", "ev_b"):
        assert sum(r.dead_letters.get("late", 0) for r in run.reports if r.table == table) > 0
    assert not list((tmp_path / "ck").glob("*/tidemark/step-probes/*.json"))


@pytest.mark.parametrize(
    "seed",
    # The second seed runs in the slow suite (CI's budget): `-m slow -k in_one_job`.
    [20261124, pytest.param(20261125, marks=pytest.mark.slow)]
    if "DIFFERENTIAL_SEED" not in os.environ
    else _seeds([]),
)
def test_native_aggregation_in_one_job_equals_reference_s11_s14(
    seed: int, kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """One native view per table, so each table's query reads its source once and, in local
    mode, a step is one job (ADR 0008): the source tasks write the dead letters (``ev_b``;
    ``ev_a``'s go with its filter views) and leave their probes, from which the aggregate's
    tasks compute the step's header themselves. Each step's records carry that step's
    waterline, the one the driver computed."""
    scenario = generate(
        seed, cases=2, steps=4, rows_per_step=24, native=True, slice_views=True, bare=("ev_b",)
    )
    run = _check(scenario, kafka, unique_topic, tmp_path, single_partition_outputs=True)
    assert compare_step_headers(run, [c.name for c in scenario.cases]) == []
    for table, view in (("ev_a", "v000"), ("ev_b", "v001")):
        assert sum(r.outputs.get(view, 0) for r in run.reports) > 0
        assert sum(r.dead_letters.get("late", 0) for r in run.reports if r.table == table) > 0
        assert list((tmp_path / "ck" / table / "tidemark" / "step-probes").glob("*.json"))


@pytest.mark.parametrize("seed", _seeds([20261123]))
def test_slice_views_equal_reference_s5_s8_s14(
    seed: int, kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """Tables with stateless views only: ev_a's filter rows and forward columns, so its source
    tasks compute them over Arrow (ADR 0007), chained through a local view; ev_b's compute a
    column, so Spark does (ADR 0005). Both record for record as the oracle's, with their
    waterline headers, late rows, punctuations and malformed records."""
    scenario = generate(seed, cases=0, steps=4, rows_per_step=30, slice_views=True)
    run = _check(scenario, kafka, unique_topic, tmp_path)
    circuit = run.circuit
    computed = {
        t.name: slice_computable(
            per_step_views(
                circuit, [v for v in circuit.views if circuit.root_table(v.name) == t]
            )
        )
        for t in circuit.tables
    }
    assert computed == {"ev_a": True, "ev_b": False}
    assert sum(r.outputs.get("sa_chain", 0) for r in run.reports) > 0


LONG_SEEDS = [int(s) for s in os.environ.get("DIFFERENTIAL_SEEDS", "1,2,3,4,5,6,7,8,9,10").split(
    ",")]


@pytest.mark.slow
@pytest.mark.parametrize("seed", _seeds(LONG_SEEDS))
def test_spark_equals_reference_long_run_s3_s14(
    seed: int, kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """The longer run of docs/differential.md: 10 seeds x 50 views, 5 steps each (50 views
    per program: see docs/differential.md on the transaction offset-metadata limit)."""
    scenario = generate(seed, cases=50, steps=5, rows_per_step=20)
    _check(scenario, kafka, unique_topic, tmp_path)



UNION_VIEWS = 4
JOIN_VIEWS = 6
#: Joins without a time bound (every row kept, S16).
REGULAR_JOIN_VIEWS = 2
#: Window joins (each side windowed in a local view, S16).
WINDOW_JOIN_VIEWS = 3
#: Temporal joins (FOR SYSTEM_TIME AS OF, S16), INNER or LEFT, either table versioned.
TEMPORAL_JOIN_VIEWS = 4
#: Native aggregates over a UNION ALL of both tables (SPEC S11, S17).
UNION_AGGREGATE_VIEWS = int(os.environ.get("DIFFERENTIAL_UNION_AGGREGATES", "7"))
SEVERAL_TABLE_SEEDS = [
    int(s) for s in os.environ.get("DIFFERENTIAL_SEVERAL_SEEDS", "20261126").split(",")
]
LONG_SEVERAL_TABLE_SEEDS = [
    int(s)
    for s in os.environ.get("DIFFERENTIAL_LONG_SEVERAL_SEEDS", "1,2,3,4,5,6,7,8,9,10").split(",")
]


def _check_several_tables(
    seed: int, kafka: Any, unique_topic: Any, tmp_path: Path
) -> dict[str, int]:
    scenario = generate(
        seed,
        cases=0,
        steps=4,
        rows_per_step=18,
        unions=UNION_VIEWS,
        joins=JOIN_VIEWS,
        regular_joins=REGULAR_JOIN_VIEWS,
        window_joins=WINDOW_JOIN_VIEWS,
        union_aggregates=UNION_AGGREGATE_VIEWS,
        temporal_joins=TEMPORAL_JOIN_VIEWS,
    )
    run = _check(scenario, kafka, unique_topic, tmp_path)
    (query,) = physical_plan(run.circuit).queries
    assert query.tables == ("ev_a", "ev_b")
    written = {n: sum(r.outputs.get(n, 0) for r in run.reports) for n in scenario.stateless}
    assert written["un0"] > 0, written
    assert sum(written[n] for n in written if n.startswith("jn")) > 0, written
    assert sum(written[n] for n in written if n.startswith("jg")) > 0, written
    assert sum(written[n] for n in written if n.startswith("jt")) > 0, written
    native = [v.view for v in query.views if v.placement == "native"]
    assert native == [f"ug{i}" for i in range(UNION_AGGREGATE_VIEWS)], native
    for table in ("ev_a", "ev_b"):
        assert sum(r.dead_letters.get("late", 0) for r in run.reports if r.table == table) > 0
    return written


@pytest.mark.slow  # ~2 min; CI covers unions and joins in the composed differential
@pytest.mark.parametrize("seed", _seeds(SEVERAL_TABLE_SEEDS))
def test_unions_and_joins_equal_reference_s8_s14_s16_s17(
    seed: int, kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """Generated UNION ALL views (2-3 branches, filters, computed and renamed columns,
    windows, no time attribute; some read by another view, some local), INNER and OUTER
    interval joins (either side first, drawn keys incl. a nullable one, bounds, residuals of
    the INNER ones and WHEREs; some read by another view), INNER joins without a time bound,
    INNER window joins (TUMBLE or HOP on each side) and INNER and LEFT temporal joins (either
    table versioned, drawn residuals and WHEREs) over both tables, in their one query
    (ADR 0013): every record as the oracle's, with the merged (S17) or held-back (S16)
    waterline as its header, late rows, punctuations and malformed records each a dead letter
    of its own table; and windowed aggregates over a UNION ALL, some of whose windows
    complete in the 4 steps."""
    written = _check_several_tables(seed, kafka, unique_topic, tmp_path)
    # Some seeds' draws complete no window of these in 4 steps (all equal, none written).
    assert sum(written[n] for n in written if n.startswith("jw")) > 0, written
    assert sum(written[n] for n in written if n.startswith("ug")) > 0, written


@pytest.mark.slow
@pytest.mark.parametrize("seed", _seeds(LONG_SEVERAL_TABLE_SEEDS))
def test_unions_and_joins_equal_reference_long_run(
    seed: int, kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """The same over more seeds (``DIFFERENTIAL_LONG_SEVERAL_SEEDS``)."""
    _check_several_tables(seed, kafka, unique_topic, tmp_path)


LONG_CASCADE_SEEDS = [
    int(s) for s in os.environ.get("DIFFERENTIAL_LONG_CASCADE_SEEDS", "1,2,3,4,5").split(",")
]


@pytest.mark.slow
@pytest.mark.parametrize("seed", _seeds(LONG_CASCADE_SEEDS))
def test_cascades_equal_reference_long_run(
    seed: int, kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """12 generated cascades of windows (two or three levels, TUMBLE or HOP over the window
    end below, every format) per seed (``DIFFERENTIAL_LONG_CASCADE_SEEDS``), over 6 steps:
    every record as the oracle's (S11, S12, S18)."""
    scenario = generate(seed, cases=0, steps=6, rows_per_step=18, bare=("ev_b",), cascades=12)
    _check(scenario, kafka, unique_topic, tmp_path)


LONG_SESSION_SEEDS = [
    int(s)
    for s in os.environ.get("DIFFERENTIAL_LONG_SESSION_SEEDS", "1,2,3,4,5,6,7,8,9,10").split(",")
]


@pytest.mark.slow
@pytest.mark.parametrize("seed", _seeds(LONG_SESSION_SEEDS))
def test_sessions_equal_reference_long_run(
    seed: int, kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """12 generated SESSION aggregates per seed (``DIFFERENTIAL_LONG_SESSION_SEEDS``), over 6
    steps of out-of-order, late and punctuated rows: every record as the oracle's (L4, S9,
    S11, S12)."""
    scenario = generate(seed, cases=0, steps=6, rows_per_step=18, sessions=12)
    _check(scenario, kafka, unique_topic, tmp_path, single_partition_outputs=True)


LONG_CUMULATE_SEEDS = [
    int(s)
    for s in os.environ.get("DIFFERENTIAL_LONG_CUMULATE_SEEDS", "1,2,3,4,5,6,7,8,9,10").split(",")
]


@pytest.mark.slow
@pytest.mark.parametrize("seed", _seeds(LONG_CUMULATE_SEEDS))
def test_cumulates_equal_reference_long_run(
    seed: int, kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """12 generated CUMULATE aggregates per seed (``DIFFERENTIAL_LONG_CUMULATE_SEEDS``), every
    EMIT form and format the per-step run covers, over 6 steps of out-of-order, late and
    punctuated rows: every record as the oracle's (L4, S9, S11, S12)."""
    scenario = generate(seed, cases=0, steps=6, rows_per_step=18, cumulates=12)
    _check(scenario, kafka, unique_topic, tmp_path)


LONG_DERIVED_SEEDS = [
    int(s)
    for s in os.environ.get("DIFFERENTIAL_LONG_DERIVED_SEEDS", "1,2,3,4,5,6,7,8,9,10").split(",")
]


@pytest.mark.slow
@pytest.mark.parametrize("seed", _seeds(LONG_DERIVED_SEEDS))
def test_derived_time_attributes_equal_reference_long_run(
    seed: int, kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """12 generated aggregates by derived time attributes per seed
    (``DIFFERENTIAL_LONG_DERIVED_SEEDS``): keys ``ts +/- INTERVAL``, CEIL/FLOOR/DATE_TRUNC of a
    shifted ts, and windows on such a column of a local view, every EMIT form and format,
    over 6 steps of out-of-order, late and punctuated rows: every record as the oracle's
    (S10, S11, S12, S14)."""
    scenario = generate(seed, cases=0, steps=6, rows_per_step=18, derived=12)
    _check(scenario, kafka, unique_topic, tmp_path)


LONG_PROCTIME_SEEDS = [
    int(s)
    for s in os.environ.get("DIFFERENTIAL_LONG_PROCTIME_SEEDS", "1,2,3,4,5,6,7,8,9,10").split(",")
]


@pytest.mark.slow
@pytest.mark.parametrize("seed", _seeds(LONG_PROCTIME_SEEDS))
def test_proctimes_equal_reference_long_run(
    seed: int, kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """12 generated aggregates windowed on a PROCTIME column and two views of NOW() per seed
    (``DIFFERENTIAL_LONG_PROCTIME_SEEDS``), every EMIT form and format, over 6 steps of
    out-of-order, late and punctuated rows: every record as the oracle's fed the steps and
    batch times the table's query ran (seed 004; S11, S12, S13)."""
    scenario = generate(seed, cases=0, steps=6, rows_per_step=18, proctimes=12,
                        bare=("ev_a", "ev_b"))
    _check(scenario, kafka, unique_topic, tmp_path)


LONG_TOP_N_SEEDS = [
    int(s)
    for s in os.environ.get("DIFFERENTIAL_LONG_TOP_N_SEEDS", "1,2,3,4,5,6,7,8,9,10").split(",")
]


@pytest.mark.slow
@pytest.mark.parametrize("seed", _seeds(LONG_TOP_N_SEEDS))
def test_top_ns_equal_reference_long_run(
    seed: int, kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """12 generated window Top-N views per seed (``DIFFERENTIAL_LONG_TOP_N_SEEDS``):
    ROW_NUMBER over a window function's rows, ROW_NUMBER and RANK over an EMIT AFTER
    WATERMARK aggregate's final rows, N from 1 to 3, ASC and DESC, over 6 steps of
    out-of-order, late and punctuated rows: every record as the oracle's (S11, S12)."""
    scenario = generate(seed, cases=0, steps=6, rows_per_step=18, top_ns=12)
    run = _check(scenario, kafka, unique_topic, tmp_path)
    written = [sum(r.outputs.get(f"tn{i}", 0) for r in run.reports) for i in range(12)]
    assert sum(n > 0 for n in written) >= 6, written


LONG_OVER_SEEDS = [
    int(s)
    for s in os.environ.get("DIFFERENTIAL_LONG_OVER_SEEDS", "1,2,3,4,5,6,7,8,9,10").split(",")
]


@pytest.mark.slow
@pytest.mark.parametrize("seed", _seeds(LONG_OVER_SEEDS))
def test_overs_equal_reference_long_run(
    seed: int, kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """12 generated OVER views per seed (``DIFFERENTIAL_LONG_OVER_SEEDS``): RANGE and ROWS
    frames, bounded or not, drawn PARTITION BY and aggregates, over 6 steps of out-of-order,
    late and punctuated rows: every record as the oracle's, each row written in the step its
    waterline passes it (docs/semantics.md, OVER aggregates)."""
    scenario = generate(seed, cases=0, steps=6, rows_per_step=18, overs=12)
    run = _check(scenario, kafka, unique_topic, tmp_path, single_partition_outputs=True)
    written = [sum(r.outputs.get(f"ov{i}", 0) for r in run.reports) for i in range(12)]
    assert sum(written) > 0, written
    steps = compare_step_headers(run, [f"ov{i}" for i in range(12)])
    assert not steps, steps
    for case in scenario.cases:
        # Each row in the step whose waterline passes it: the oracle's count per step.
        spark_steps = [r.outputs.get(case.name, 0) for r in run.reports if r.table == case.table]
        oracle_steps = [len(result.outputs[case.name]) for result in run.oracle]
        assert spark_steps == oracle_steps, (case.name, spark_steps, oracle_steps)
