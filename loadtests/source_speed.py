"""Rows per second of the Kafka source's hot path on one core, without a broker:
``python -m loadtests.source_speed [--rows 200000] [--rev GIT_REV] [--profile]``.

It builds ``--rows`` Avro records of workload (a) (loadtests.generator: about 1% late, 5% out of
order) plus a few bad ones (garbage, cut, extra bytes, a null in a NOT NULL column written with a
nullable schema, a punctuation), wraps them in real ``confluent_kafka.Message`` objects, and
times what ``read_slice`` does with them: decode, LateGate, Arrow batches, the probe row. The
records are cut into consecutive slices of ``--slice-rows`` (one step each); each slice starts
with the waterline the previous slices' probe rows give (S3), as in the service, so the late
ones are judged as they would be. Consuming from Kafka and the SliceCache are left out.

``--rev REV`` runs the same measurement on another revision's ``app/`` (exported with
``git archive``, no checkout) so a change can be measured against what it replaced; both runs
print a digest of every output row, which must be equal when the output did not change.
``--profile`` prints cProfile's top functions by internal time.

Arrow is limited to one CPU thread so the figure is per core; ``cpu_rows_per_s`` divides by the
process CPU time of the timed part, ``rows_per_s`` by its wall time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "clicks.in"


def _spec(workload: str) -> Any:
    from app.program.compile import compile_program
    from app.runtime.operators.source import source_spec
    from loadtests.workloads import WORKLOADS

    with tempfile.TemporaryDirectory() as tmp:
        program = Path(tmp) / "p.sql"
        program.write_text(WORKLOADS[workload].program.format(topic=TOPIC, out="o"))
        return source_spec(compile_program(program).tables[0])


def messages(spec: Any, workload: str, rows: int, headers: bool) -> list[Any]:
    """The input, as the consumer would hand it over: offsets 0.., one partition."""
    import io

    import fastavro
    from confluent_kafka import Message

    from app.connectors.avro_codec import AvroCodec
    from loadtests.generator import EventShape, events
    from loadtests.workloads import WORKLOADS

    shape = EventShape(spec.avro_schema, lateness_ms=WORKLOADS[workload].lateness_ms)
    codec = AvroCodec(spec.avro_schema)
    loose = fastavro.parse_schema(
        {
            **spec.avro_schema,
            "fields": [{**f, "type": ["null", f["type"]]} for f in spec.avro_schema["fields"]],
        }
    )
    out: list[Any] = []
    for i, row in events(shape, rows):
        value: bytes | None = codec.encode(row)
        head: list[tuple[str, bytes]] | None = (
            [("produce_ms", (1_700_000_000_000 + i).to_bytes(8, "big"))] if headers else None
        )
        bad = i % 20_011
        if bad == 5_000:
            value = b"\x00\xff\xfe not avro"
        elif bad == 10_000:
            value = value[:-2] if value else value
        elif bad == 15_000:
            value = (value or b"") + b"\x02"
        elif bad == 17_000:
            buffer = io.BytesIO()
            fastavro.schemaless_writer(buffer, loose, {**row, "usr": None})
            value = buffer.getvalue()
        elif bad == 19_000:
            value, head = None, [*(head or []), ("tidemark.bound", str(row["ts"]).encode())]
        out.append(
            Message(
                topic=TOPIC, partition=0, offset=i, key=str(i).encode(), value=value, headers=head
            )
        )
    return out


def _decoder(module: Any) -> Callable[[Any, Any, list[Any]], Iterator[Any]]:
    """How this revision's source decodes given messages: ``decode_slice`` where it exists;
    older revisions only had ``read_slice`` over ``_fetch``, so their ``_fetch`` is replaced."""
    decode_slice = getattr(module, "decode_slice", None)
    if decode_slice is not None:
        return lambda spec, part, msgs: decode_slice(spec, part, msgs)

    def old(spec: Any, part: Any, msgs: list[Any]) -> Iterator[Any]:
        module._fetch = lambda conf, topic, p: iter(msgs)
        return module.read_slice(spec, {}, part)  # type: ignore[no-any-return]

    return old


def measure(
    workload: str, rows: int, slice_rows: int, headers: bool, profile: bool, repeat: int = 1
) -> dict[str, Any]:
    """The best of ``repeat`` runs (other work on the machine only ever slows a run down)."""
    import pyarrow as pa

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    spec = _spec(workload)
    msgs = messages(spec, workload, rows, headers)
    best: dict[str, Any] | None = None
    for _ in range(repeat):
        result = _measure_once(spec, msgs, slice_rows, profile)
        result.update(workload=workload, headers=headers)
        if best is not None and best["digest"] != result["digest"]:
            raise RuntimeError("two runs over the same input gave different rows")
        if best is None or result["cpu_rows_per_s"] > best["cpu_rows_per_s"]:
            best = result
    assert best is not None
    best["repeat"] = repeat
    return best


def _measure_once(spec: Any, msgs: list[Any], slice_rows: int, profile: bool) -> dict[str, Any]:
    import pyarrow as pa

    from app.connectors import kafka_source

    decode = _decoder(kafka_source)
    lateness = dict(spec.lateness)
    waterlines: dict[str, int | None] = {}
    outputs: list[list[Any]] = []
    wall = cpu = 0.0
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
    for step, start in enumerate(range(0, len(msgs), slice_rows), start=1):
        chunk = msgs[start : start + slice_rows]
        part = kafka_source.KafkaPartitionSlice(
            0, start, start + len(chunk), step, 1_700_000_000_000, dict(waterlines)
        )
        w0, c0 = time.perf_counter(), time.process_time()
        if profiler is not None:
            profiler.enable()
        batches = list(decode(spec, part, chunk))
        if profiler is not None:
            profiler.disable()
        wall += time.perf_counter() - w0
        cpu += time.process_time() - c0
        outputs.append(batches)
        probe = batches[-1].slice(batches[-1].num_rows - 1).to_pylist()[0]
        for col, amount in lateness.items():
            top = probe[col]
            if top is not None:
                mark = int(top.timestamp() * 1000) - amount if hasattr(top, "timestamp") else top
                old = waterlines.get(col)
                waterlines[col] = mark if old is None else max(old, mark)
    digest = hashlib.sha256()
    kinds: Counter[str] = Counter()
    for batches in outputs:
        table = pa.Table.from_batches(batches)
        kinds.update(table.column("_kind").to_pylist())
        for name in table.column_names:
            digest.update(name.encode())
            digest.update(repr(table.column(name).to_pylist()).encode())
    result = {
        "rows": len(msgs),
        "slice_rows": slice_rows,
        "seconds": round(wall, 3),
        "rows_per_s": round(len(msgs) / wall),
        "cpu_rows_per_s": round(len(msgs) / cpu),
        "kinds": dict(sorted(kinds.items())),
        "digest": digest.hexdigest()[:16],
        "app": str(Path(kafka_source.__file__).resolve().parents[2]),
    }
    if profiler is not None:
        import io
        import pstats

        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(18)
        result["profile"] = text.getvalue()
    return result


def at_revision(rev: str, argv: list[str]) -> dict[str, Any]:
    """Run this benchmark in a subprocess whose ``app`` package is ``rev``'s."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "archive", rev, "app"], cwd=ROOT, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        shutil.copytree(ROOT / "loadtests", Path(tmp) / "loadtests")
        env = {**os.environ, "PYTHONPATH": tmp}
        proc = subprocess.run(
            [sys.executable, "-m", "loadtests.source_speed", *argv],
            cwd=tmp,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
        if not result["app"].startswith(tmp):
            raise RuntimeError(f"ran {result['app']}, not the exported {rev}")
        result["rev"] = rev
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="a")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--slice-rows", type=int, default=25_000)
    parser.add_argument("--headers", action="store_true", help="a header on every record")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="report the best of this many")
    parser.add_argument("--rev", help="measure this git revision's app/ instead")
    parser.add_argument("--json", action="store_true", help="one JSON line only")
    args = parser.parse_args()
    if args.rev:
        inner = [
            "--workload",
            args.workload,
            "--rows",
            str(args.rows),
            "--slice-rows",
            str(args.slice_rows),
            "--repeat",
            str(args.repeat),
            "--json",
        ]
        inner += ["--headers"] * args.headers + ["--profile"] * args.profile
        result = at_revision(args.rev, inner)
    else:
        result = measure(
            args.workload, args.rows, args.slice_rows, args.headers, args.profile, args.repeat
        )
    if args.json:
        print(json.dumps(result))
        return
    profile = result.pop("profile", None)
    print(json.dumps(result, indent=1))
    if profile:
        print(profile)


if __name__ == "__main__":
    main()
