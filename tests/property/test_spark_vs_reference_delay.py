"""Differential test of EMIT ... AFTER DELAY: generated views, Spark vs the reference (S11-S14).

The generator (:func:`differential_cases.generate` with ``delay=True``) writes a program of two
tables and 14 views, every one ``EMIT [STREAM] AFTER DELAY`` or ``EMIT [STREAM] AFTER
WATERMARK AND AFTER DELAY`` (each form with every format the compiler accepts for it, TUMBLE,
HOP and unwindowed; aggregates, WHERE, HAVING as in the other differential tests), plus its
steps of input (out of order, late rows, rows at the waterline, NULLs, punctuations, malformed
records).

``Service.start(once=True)`` per step cannot check these views: a held change comes out in a
step Spark runs *without* input, at the first batch time ``>= p + d``. So the service runs
continuously (1 s trigger, d = 30 s), as in tests/e2e/test_emit_after_delay.py, over two
phases:

    phase 1   steps 1, 2, 3, each produced as soon as Spark has planned the step that reads
              the previous one (its offsets are in the offset log), so the next one is read by
              the step after it (step 1 is also the query's slow first step), then quiet until
              a step ran d + 2 s after the one that read step 3;
    phase 2   steps 4, 5, the same, then quiet until d + 2 s after step 5's.

Then the service stops, and per table the steps Spark committed are read back from the
query's offset log (rows per step from the offset ranges, the step's batch time, empty steps
included) and fed to one reference evaluator per table (each table is its own Spark query
with its own batch times; views read one table). Compared, record for record:

- dead letters per table (partition, offset, reason, column), table waterlines per data step;
- changelog views: the (undo, values, ver) sequence per group *and* each record's ``ptime``
  (Spark's batch time, which the reference was given, so it must be equal); upsert views: the
  value sequence per key and the final table; append views: the multiset of values;
- the ``tidemark.waterline`` header of every record.

One allowance, the documented one (docs/semantics.md, "EMIT AFTER DELAY on Spark"): Spark sees
the waterline one step late, so a final row of an AFTER WATERMARK AND AFTER DELAY view (its
window complete by the reference's table waterline) may come in the step after the reference's,
with that step's ``ptime`` and header. A held change due by its delay has no allowance.

Timing guard: the test exercises coalescing only if steps 4 and 5 reach Spark within d of each
other; on a machine too slow for that it fails saying so (never a longer wait or a looser
comparison). ``DIFFERENTIAL_SEED=<seed>`` reruns one seed.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from differential_cases import DELAY_FORMS, Case, Scenario, generate
from spark_offset_log import Batch, spark_batches
from test_spark_vs_reference import (
    NO_HEADER,
    _hashable,
    _produce_step,
    _same,
    _seeds,
    _sortable,
)

from app.circuit.ir import Circuit, View, Window
from app.circuit.reference import Punctuation, Reference, StepInput, StepResult
from app.connectors.avro_codec import AvroCodec
from app.connectors.sink import format_time_value
from app.connectors.topic_reader import read_topic
from app.program.compile import compile_program
from app.runtime.service import Service
from app.runtime.step.step_sink import StepReport

pytestmark = pytest.mark.e2e

DELAY_S = 30
DELAY_MS = DELAY_S * 1000
MARGIN_MS = 2000
CASES = 14
PHASES = ((0, 1, 2), (3, 4))
WAIT_S = 300

Placed = list[tuple[int, int, str, Any]]  # (partition, offset, kind, payload)


@dataclass
class DelayRun:
    """The service's run of one scenario, and what the reference made of the same steps."""

    scenario: Scenario
    circuit: Circuit
    topics: dict[str, str]
    kafka_conf: dict[str, str]
    checkpoint: Path
    placed: dict[str, Placed] = field(default_factory=dict)
    data_batches: dict[str, list[int]] = field(default_factory=dict)  # batch reading step i
    reports: list[StepReport] = field(default_factory=list)
    batches: dict[str, list[Batch]] = field(default_factory=dict)
    oracle: dict[str, list[StepResult]] = field(default_factory=dict)

    def committed(self, table: str, planned: bool = False) -> list[Batch]:
        """The table's written steps; ``planned``: also the step in flight (its offsets are
        fixed once in the offset log)."""
        written = None if planned else {r.batch_id for r in list(self.reports) if r.table == table}
        return spark_batches(self.checkpoint / table / "spark", written)

    def read_all(self, table: str, planned: bool = False) -> int:
        """The first step whose end offsets include every record produced so far, or -1."""
        wanted: dict[int, int] = {}
        for p, o, _, _ in self.placed[table]:
            wanted[p] = max(wanted.get(p, 0), o + 1)
        for batch in self.committed(table, planned):
            if all(batch.ends.get(p, 0) >= o for p, o in wanted.items()):
                return batch.batch_id
        return -1

    def quiet_after(self, table: str, batch_id: int, ms: int) -> bool:
        """A step of ``table`` ran at least ``ms`` after step ``batch_id`` and was written."""
        batches = {b.batch_id: b for b in self.committed(table)}
        if batch_id not in batches:
            return False
        start = batches[batch_id].time_ms
        return any(b.batch_id > batch_id and b.time_ms >= start + ms for b in batches.values())


def _wait(service: Service, run: DelayRun, what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        for query in service.queries:
            if query.exception() is not None:
                raise AssertionError(f"query failed while waiting for {what}: {query.exception()}")
        if time.monotonic() > deadline:
            seen = {t: [(b.batch_id, b.time_ms) for b in run.committed(t)] for t in run.placed}
            raise AssertionError(f"timed out after {WAIT_S} s waiting for {what}; steps {seen}")
        time.sleep(0.2)


def run_continuously(scenario: Scenario, kafka: Any, unique_topic: Any, tmp_path: Path) -> DelayRun:
    """Produce the phases to a continuously running service (see the module docstring)."""
    tag = unique_topic("dd")
    topics = {name: f"{tag}.{name}" for name in scenario.topic_names()}
    tables = list(scenario.lateness_s)
    for table in tables:
        kafka.create_topic(topics[table], partitions=2)
    program = tmp_path / f"delay_{scenario.seed}.sql"
    program.write_text(scenario.program(topics))
    circuit = compile_program(program)
    run = DelayRun(scenario, circuit, topics, kafka.conf(), tmp_path / "ck")
    run.placed = {t: [] for t in tables}
    run.data_batches = {t: [] for t in tables}
    codecs = {t.name: AvroCodec(t.avro_schema) for t in circuit.tables}
    from confluent_kafka import Producer

    producer = Producer({**kafka.conf(), "log_level": 3})
    service = Service(
        circuit,
        kafka.settings(
            run.checkpoint,
            shuffle_partitions=2,
            trigger_interval="1000ms",
            wait_for_topics_seconds=30,  # a new topic reaches every broker view a moment later
        ),
        on_step=run.reports.append,
    )
    service.start()
    try:
        for phase in PHASES:
            for index in phase:
                placed = _produce_step(producer, topics, scenario.steps[index], codecs)
                for table in tables:
                    run.placed[table].extend(placed.get(table, []))
                    before = run.data_batches[table][-1] if run.data_batches[table] else -1
                    _wait(
                        service,
                        run,
                        f"step {index + 1} of {table} read",
                        lambda t=table, b=before: run.read_all(t, planned=True) > b,
                    )
                    # The next step is produced while this one runs: within d of it even on a
                    # loaded machine (its own step, as it is read after this one is planned).
                    run.data_batches[table].append(run.read_all(table, planned=True))
            for table in tables:
                last = run.data_batches[table][-1]
                _wait(
                    service,
                    run,
                    f"{table} quiet for d + margin after step {phase[-1] + 1}",
                    lambda t=table, b=last: run.quiet_after(t, b, DELAY_MS + MARGIN_MS),
                )
    finally:
        service.stop()
    for table in tables:
        run.batches[table] = run.committed(table)
        run.oracle[table] = _reference(circuit, table, run.placed[table], run.batches[table])
    return run


def _reference(
    circuit: Circuit, table: str, placed: Placed, batches: list[Batch]
) -> list[StepResult]:
    """One reference fed one table's steps as Spark ran them: rows and punctuations by offset
    range, in (partition, offset) order, and the step's batch time."""
    reference = Reference(circuit)
    results = []
    previous: dict[int, int] = {}
    for batch in batches:
        records = sorted(
            (r for r in placed if previous.get(r[0], 0) <= r[1] < batch.ends.get(r[0], 0)),
            key=lambda r: (r[0], r[1]),
        )
        rows = [{**payload, "_p": p, "_o": o} for p, o, kind, payload in records if kind == "row"]
        marks = [Punctuation(payload) for _, _, kind, payload in records if kind == "punctuation"]
        step = StepInput(
            rows={table: rows}, punctuations={table: marks}, batch_time_ms=batch.time_ms
        )
        results.append(reference.step(step))
        previous = batch.ends
    return results


# --- comparing --------------------------------------------------------------------------------


def compare_tables(run: DelayRun) -> list[str]:
    """Dead letters per table (S5-S7) and the table waterline after every data step (S3/S4)."""
    problems = []
    for table, results in run.oracle.items():
        expected: Counter[tuple[Any, ...]] = Counter(
            (p, o, "malformed", None) for p, o, kind, _ in run.placed[table] if kind == "malformed"
        )
        for result in results:
            for dead in result.dead_letters:
                expected[(dead.row["_p"], dead.row["_o"], dead.reason, dead.column)] += 1
        actual: Counter[tuple[Any, ...]] = Counter()
        for msg in read_topic(run.kafka_conf, run.topics[table + ".dlq"]):
            h = {k: v.decode() for k, v in msg.headers()}
            actual[
                (
                    int(h["tidemark.source.partition"]),
                    int(h["tidemark.source.offset"]),
                    h["tidemark.error.reason"],
                    h.get("tidemark.late.column"),
                )
            ] += 1
        if actual != expected:
            problems.append(
                f"{table} dead letters: missing {sorted(expected - actual)}, "
                f"extra {sorted(actual - expected)}"
            )
        index = {b.batch_id: i for i, b in enumerate(run.batches[table])}
        for report in run.reports:
            if report.table != table or report.step is None or report.batch_id not in index:
                continue
            want = results[index[report.batch_id]].waterlines[table]["ts"]
            if report.waterlines.get("ts") != want:
                problems.append(
                    f"{table} step {report.batch_id}: waterline "
                    f"{report.waterlines.get('ts')} != oracle {want}"
                )
    return problems


def _window_end(view: View, row: dict[str, Any]) -> int | None:
    if "window_end" in row:
        return int(row["window_end"])
    windows = [op for op in view.operators if isinstance(op, Window)]
    if "window_start" in row and windows:
        return int(row["window_start"]) + windows[0].size
    return None


def compare_view(run: DelayRun, name: str, table: str) -> list[str]:
    """Every record of one view (module docstring), ``ptime`` exact for changelog views."""
    view = run.circuit.view(name)
    out = view.output
    assert out is not None
    batches = run.batches[table]
    results = run.oracle[table]
    # The oracle's records: (key, value, allowed ptimes, allowed waterline headers).
    oracle: list[tuple[Any, Any, set[int], set[str]]] = []
    for i, result in enumerate(results):
        w = result.waterlines[table]["ts"]
        for record in result.outputs[name]:
            row = dict(record.value if record.value is not None else record.key or {})
            times = {batches[i].time_ms}
            headers = (
                {format_time_value(record.waterline, "ms")} if view.time_attributes else {NO_HEADER}
            )
            end = _window_end(view, row)
            final = view.emit.after_watermark and end is not None and w is not None and end <= w
            if final and i + 1 < len(batches):
                times.add(batches[i + 1].time_ms)
                headers.add(format_time_value(results[i + 1].view_waterlines[name], "ms"))
            value = None if record.value is None else dict(record.value)
            oracle.append((record.key, value, times, headers))
    key_codec = AvroCodec(out.key_schema) if out.key_schema else None
    value_codec = AvroCodec(out.value_schema)
    spark: list[tuple[Any, Any, str]] = []
    for msg in read_topic(run.kafka_conf, run.topics[name]):
        key = key_codec.decode(msg.key()) if key_codec and msg.key() is not None else None
        value = None if msg.value() is None else value_codec.decode(msg.value())
        header = dict(msg.headers() or ()).get("tidemark.waterline", NO_HEADER.encode()).decode()
        spark.append((key, value, header))

    problems: list[str] = []
    if out.format == "append":
        want = sorted((v for _, v, _, _ in oracle), key=_sortable)
        got = sorted((v for _, v, _ in spark), key=_sortable)
        if not _same(want, got):
            problems.append(f"append multiset: oracle {want} != spark {got}")
        allowed = set().union(*(h for _, _, _, h in oracle)) if oracle else set()
        bad = {h for _, _, h in spark} - allowed
        if bad:
            problems.append(f"waterline headers {sorted(bad)} not in {sorted(allowed)}")
        return problems

    def group_of(key: Any, value: Any) -> Any:
        if out.format == "changelog":
            return tuple(value[c] for c in out.key_columns)
        return _hashable(key)

    want_seq: dict[Any, list[tuple[Any, set[int], set[str]]]] = defaultdict(list)
    got_seq: dict[Any, list[tuple[Any, str]]] = defaultdict(list)
    for key, value, times, headers in oracle:
        want_seq[group_of(key, value)].append((value, times, headers))
    for key, value, header in spark:
        got_seq[group_of(key, value)].append((value, header))
    if out.format == "changelog":
        for seq in got_seq.values():
            seq.sort(key=lambda item: item[0]["ver"])
    for group in sorted(set(want_seq) | set(got_seq), key=repr):
        want = want_seq.get(group, [])
        got = got_seq.get(group, [])
        strip = _without_ptime if out.format == "changelog" else _as_is
        if not _same([strip(v) for v, _, _ in want], [strip(v) for v, _ in got]):
            problems.append(
                f"group {group}: oracle {[v for v, _, _ in want]} != spark {[v for v, _ in got]}"
            )
            continue
        for (_, times, headers), (value, header) in zip(want, got, strict=True):
            if out.format == "changelog" and value["ptime"] not in times:
                problems.append(f"group {group}: {value} ptime not in oracle's {sorted(times)}")
            if header not in headers:
                problems.append(f"group {group}: {value} header {header} not in {headers}")
    if out.format == "upsert":
        final_want = {g: s[-1][0] for g, s in want_seq.items() if s and s[-1][0] is not None}
        final_got = {g: s[-1][0] for g, s in got_seq.items() if s and s[-1][0] is not None}
        if not _same(final_want, final_got):
            problems.append("final upsert tables differ")
    return problems


def _without_ptime(value: Any) -> Any:
    return None if value is None else {k: v for k, v in value.items() if k != "ptime"}


def _as_is(value: Any) -> Any:
    return value


def _coverage(scenario: Scenario) -> list[str]:
    """What the scenario must contain for this test to mean what the docs say it does."""
    missing = []
    forms = {(c.emit.replace(f"'{DELAY_S}'", "'{d}'"), c.fmt) for c in scenario.cases}
    for _, emit, fmt in DELAY_FORMS:
        if (emit, fmt) not in forms:
            missing.append(f"{emit} as {fmt}")
    for shape in ("TUMBLE(", "HOP(", "FROM ev_"):
        if not any(shape in c.sql for c in scenario.cases):
            missing.append(shape)
    return missing


def _check(scenario: Scenario, kafka: Any, unique_topic: Any, tmp_path: Path) -> DelayRun:
    run = run_continuously(scenario, kafka, unique_topic, tmp_path)
    found: dict[str, list[str]] = {}
    tables = compare_tables(run)
    if tables:
        found["<tables>"] = tables
    cases: list[Case] = [
        *(Case(n, n[2:], "", "stateless", "append") for n in scenario.stateless),
        *scenario.cases,
    ]
    for case in cases:
        problems = compare_view(run, case.name, case.table)
        if problems:
            found[case.name] = problems
    if found:
        details = "\n".join(f"{name}: {p}" for name, ps in found.items() for p in ps[:4])
        steps = {t: [(b.batch_id, b.time_ms) for b in bs] for t, bs in run.batches.items()}
        pytest.fail(
            f"{len(found)} of {len(cases)} views differ (seed {scenario.seed}):\n{details}\n\n"
            f"Spark's steps (batch id, batch time): {steps}\n"
            f"data steps: {run.data_batches}\n\n{scenario.describe()}",
            pytrace=False,
        )
    return run


# In the slow suite (CI's budget); CI runs the AFTER DELAY forms against the reference in
# tests/e2e/test_emit_after_delay.py. Run: `pytest -m slow -k after_delay_views_equal`.
@pytest.mark.slow
@pytest.mark.parametrize("seed", _seeds([20261123]))
def test_after_delay_views_equal_reference_on_sparks_steps_s11_s14(
    seed: int, kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    """14 generated AFTER DELAY views over two tables, one continuous Spark run of 5 steps in
    two phases: every record as the reference's fed Spark's own steps, ``ptime`` included."""
    scenario = generate(seed, cases=CASES, steps=5, rows_per_step=12, delay=True, delay_s=DELAY_S)
    missing = _coverage(scenario)
    assert not missing, f"seed {seed} does not generate {missing}"
    started = time.monotonic()
    run = _check(scenario, kafka, unique_topic, tmp_path)
    took = time.monotonic() - started
    for table, ids in run.data_batches.items():
        times = {b.batch_id: b.time_ms for b in run.batches[table]}
        gap = times[ids[4]] - times[ids[3]]
        assert gap < DELAY_MS, (
            f"{table}: step 5 reached Spark {gap} ms after step 4, so no change of step 4 could "
            f"be coalesced with step 5's: too slow a machine for d = {DELAY_S} s"
        )
    # The held changes came out in steps Spark ran without input (what --once cannot show).
    no_input: set[int] = set()
    for batches in run.batches.values():
        for before, batch in zip(batches, batches[1:], strict=False):
            if batch.ends == before.ends:
                no_input.add(batch.time_ms)
    ptimes: set[int] = set()
    for case in scenario.cases:
        out = run.circuit.view(case.name).output
        if out is None or out.format != "changelog":
            continue
        codec = AvroCodec(out.value_schema)
        for msg in read_topic(run.kafka_conf, run.topics[case.name]):
            ptimes.add(codec.decode(msg.value())["ptime"])
    assert ptimes & no_input, "no changelog record was written in a step without input"
    print(f"seed {seed}: {len(scenario.cases)} views equal, {took:.0f} s")
