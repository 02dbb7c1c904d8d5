"""Bounded state (SPEC S11): a TUMBLE view's state is flat, an unwindowed GROUP BY grows.

Two tables are fed the same generated events (one producer writes each event to both topics),
so each has its own streaming query and its own stateful operator:

- ``tw``: ``TUMBLE(ts, 10 s)`` ``COUNT(*)/SUM(n)`` per ``sid``, default EMIT (upsert): groups
  are freed once the waterline passes ``window_end`` (S11);
- ``tg``: ``COUNT(*)/SUM(n)`` per ``sid`` with no window: one group per session id ever seen
  (L7 warns about exactly this).

Events: ``--rate`` per second of wall clock, event time = wall clock (out of order by up to 2 s,
lateness 5 s); ``sid`` is a session id, a new one every ``--session-events`` events, so the key
space keeps growing like user sessions do. Every ``--sample-seconds`` the script reads
``query.lastProgress["stateOperators"][*]["numRowsTotal"]`` of each query and writes the
samples to ``--out-json`` and the plot to ``--out-png``.

    .venv/bin/python loadtests/state_bound.py --minutes 10

Uses ``KAFKA_BOOTSTRAP_SERVERS`` when set, else starts the local broker.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, Python puts loadtests/ first on sys.path, where other load tests' modules
# (profile.py) shadow the standard library: put the project root there instead.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(ROOT)
else:
    sys.path.insert(0, str(ROOT))

from app.config import Settings  # noqa: E402
from app.connectors.avro_codec import AvroCodec  # noqa: E402
from app.program.compile import compile_program  # noqa: E402
from app.runtime.service import Service  # noqa: E402

TABLE = """
CREATE TABLE {name} (
    ts   TIMESTAMP NOT NULL LATENESS INTERVAL '5' SECOND,
    sid  BIGINT NOT NULL,
    n    BIGINT NOT NULL
) WITH ('topic' = '{topic}');
"""

PROGRAM = (
    TABLE.format(name="tw", topic="{tw}")
    + TABLE.format(name="tg", topic="{tg}")
    + """
CREATE VIEW windowed WITH ('topic' = '{out_w}') AS
SELECT window_start, window_end, sid, COUNT(*) AS c, SUM(n) AS s
FROM TABLE(TUMBLE(TABLE tw, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY window_start, window_end, sid;

CREATE VIEW unwindowed WITH ('topic' = '{out_g}') AS
SELECT sid, COUNT(*) AS c, SUM(n) AS s FROM tg GROUP BY sid;
"""
)


def feed(
    conf: dict[str, str],
    topics: list[str],
    rate: int,
    session_events: int,
    stop: threading.Event,
    sent: list[int],
) -> None:
    from confluent_kafka import Producer

    codec = AvroCodec(
        {
            "type": "record",
            "name": "ev",
            "fields": [
                {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
                {"name": "sid", "type": "long"},
                {"name": "n", "type": "long"},
            ],
        }
    )
    producer = Producer({**conf, "linger.ms": 50, "log_level": 3})
    rng = random.Random(11)
    started = time.monotonic()
    i = 0
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate)
        while i < due:
            now_ms = int(time.time() * 1000)
            live = max(1, i // session_events)
            sid = rng.randint(max(0, live - 20), live)  # the ~20 most recent sessions
            value = codec.encode(
                {"ts": now_ms - rng.randint(0, 2000), "sid": sid, "n": rng.randint(0, 9)}
            )
            for topic in topics:
                producer.produce(topic, value=value, partition=i % 2)
            i += 1
        producer.poll(0)
        sent[0] = i
        time.sleep(0.05)
    producer.flush(30)


def state_rows(query: Any) -> int | None:
    progress = query.lastProgress
    if not progress:
        return None
    return sum(int(op.get("numRowsTotal", 0)) for op in progress.get("stateOperators", []))


def plot(samples: list[dict[str, Any]], path: Path, minutes: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    t = [s["seconds"] / 60 for s in samples]
    ax.plot(t, [s["tumble"] for s in samples], label="TUMBLE 10 s view (state freed per S11)")
    ax.plot(t, [s["unwindowed"] for s in samples], label="unwindowed GROUP BY sid")
    ax.set_xlabel("minutes of input")
    ax.set_ylabel("state rows (Spark stateOperators.numRowsTotal)")
    ax.set_title(f"Tidemark state over {minutes:g} minutes of generated input")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rate", type=int, default=200, help="events per second")
    parser.add_argument("--session-events", type=int, default=50)
    parser.add_argument("--sample-seconds", type=float, default=10)
    # Outside the tracked tree by default (var/ is git-ignored); docs/state-bound.md's plot is
    # regenerated with --out-png docs/img/state-bound.png.
    parser.add_argument("--out-png", type=Path, default=ROOT / "var/loadtests/state-bound.png")
    parser.add_argument("--out-json", type=Path, default=ROOT / "var/loadtests/state-bound.json")
    args = parser.parse_args()
    broker = None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        from app.local_kafka import LocalKafka

        broker = LocalKafka().start()
        bootstrap = broker.bootstrap_servers
    conf = {"bootstrap.servers": bootstrap}
    stop = threading.Event()
    service: Service | None = None
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        tag = f"state.{int(time.time())}"
        topics = {k: f"{tag}.{k}" for k in ("tw", "tg", "out_w", "out_g")}
        admin = AdminClient({**conf, "log_level": 3})
        for name in ("tw", "tg"):
            admin.create_topics([NewTopic(topics[name], 2, 1)])[topics[name]].result(30)
        work = Path(tempfile.mkdtemp(prefix="tidemark-state-"))
        program = work / "state.sql"
        program.write_text(PROGRAM.format(**topics))
        circuit = compile_program(program)
        settings = Settings(bootstrap_servers=bootstrap, checkpoint=work / "ck",
                            shuffle_partitions=2, trigger_interval="2000ms", spark_log="console")
        service = Service(circuit, settings)
        sent = [0]
        feeder = threading.Thread(
            target=feed,
            args=(conf, [topics["tw"], topics["tg"]], args.rate, args.session_events, stop, sent),
        )
        feeder.start()
        service.start()
        by_table = {q.name: q for q in service.queries}
        started = time.monotonic()
        samples: list[dict[str, Any]] = []
        while time.monotonic() - started < args.minutes * 60:
            time.sleep(args.sample_seconds)
            for q in service.queries:
                if q.exception() is not None:
                    raise q.exception()  # type: ignore[misc]
            sample = {
                "seconds": round(time.monotonic() - started, 1),
                "events": sent[0],
                "tumble": state_rows(by_table["tidemark-tw"]),
                "unwindowed": state_rows(by_table["tidemark-tg"]),
            }
            samples.append(sample)
            print(json.dumps(sample), flush=True)
        stop.set()
        feeder.join()
        service.stop()
        args.out_json.parent.mkdir(parents=True, exist_ok=True)
        args.out_json.write_text(json.dumps(samples, indent=1))
        samples = [s for s in samples if s["tumble"] is not None and s["unwindowed"] is not None]
        plot(samples, args.out_png, args.minutes)
        half = [s for s in samples if s["seconds"] >= args.minutes * 30]
        print(
            json.dumps(
                {
                    "minutes": args.minutes,
                    "events": sent[0],
                    "rate": args.rate,
                    "tumble_second_half_min": min(s["tumble"] for s in half),
                    "tumble_second_half_max": max(s["tumble"] for s in half),
                    "unwindowed_at_half": half[0]["unwindowed"],
                    "unwindowed_final": samples[-1]["unwindowed"],
                    "png": str(args.out_png),
                },
                indent=2,
            )
        )
    finally:
        stop.set()
        if service is not None:
            service.shutdown()  # stop Spark before the broker it reads goes away
        if broker is not None:
            broker.cleanup()


if __name__ == "__main__":
    main()
