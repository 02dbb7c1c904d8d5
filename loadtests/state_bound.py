"""Bounded state (SPEC S11): a TUMBLE view's state is flat, an unwindowed GROUP BY grows;
an interval join's state levels off.

``--program aggregate`` (the default): two tables are fed the same generated events (one
producer writes each event to both topics), so each has its own streaming query and its own
stateful operator:

- ``tw``: ``TUMBLE(ts, 10 s)`` ``COUNT(*)/SUM(n)`` per ``sid``, default EMIT (upsert): groups
  are freed once the waterline passes ``window_end`` (S11);
- ``tg``: ``COUNT(*)/SUM(n)`` per ``sid`` with no window: one group per session id ever seen
  (L7 warns about exactly this).

Events: ``--rate`` per second of wall clock, event time = wall clock (out of order by up to 2 s,
lateness 5 s); ``sid`` is a session id, a new one every ``--session-events`` events, so the key
space keeps growing like user sessions do. Every ``--sample-seconds`` the script reads
``query.lastProgress["stateOperators"][*]["numRowsTotal"]`` of each query and writes the
samples to ``--out-json`` and the plot to ``--out-png``.

``--program join``: workload (d) of loadtests/workloads.py, auctions ``JOIN`` bids on the
auction id with ``b.date_time BETWEEN a.date_time AND a.date_time + INTERVAL '10' MINUTE``
(one query of both tables, Spark's stream-stream join), fed ``--rate`` events per second of
wall clock by the two-topic generator (``PairShape``: 10k auction ids, one auction per 10
bids, 5% out of order, 1% late). Event time advances ``--step-ms`` per event, so at the
defaults (150/s, 20 ms) three minutes of event time pass per minute of wall clock and the
10-minute bound is passed after about 3.5 minutes of the run. Every ``--sample-seconds`` the
script reads the ``tidemark_state_rows{view="auction_bid"}`` gauge, set by the service's
query listener (app/observability/listener.py) from the join's ``stateOperators``.

    .venv/bin/python loadtests/state_bound.py --minutes 10
    .venv/bin/python loadtests/state_bound.py --program join --minutes 10

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
from loadtests.bench import broker as local_or_given_broker  # noqa: E402

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


def feed_pair(
    conf: dict[str, str],
    topics: tuple[str, str],
    shape: Any,
    rate: int,
    stop: threading.Event,
    sent: list[int],
) -> None:
    """The events of ``pair_timeline(shape)`` at ``rate`` per second of wall clock, each to
    its input's topic (auctions, bids)."""
    from confluent_kafka import Producer

    from loadtests.generator import pair_timeline

    codecs = (AvroCodec(shape.auction_schema), AvroCodec(shape.bid_schema))
    producer = Producer({**conf, "linger.ms": 50, "log_level": 3})
    events = pair_timeline(shape, 1 << 40)
    started = time.monotonic()
    i = 0
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate)
        while i < due:
            _, side, row, _late = next(events)
            producer.produce(topics[side], value=codecs[side].encode(row), key=str(i).encode())
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


def plot_join(samples: list[dict[str, Any]], path: Path, minutes: float, step_ms: int,
              rate: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    t = [s["seconds"] / 60 for s in samples]
    ax.plot(t, [s["join"] for s in samples],
            label="auctions JOIN bids, 10-minute interval (workload d)")
    # The feeder starts before the service does, so the first sample already holds minutes of
    # event time: the bound is passed where the samples' event time reaches 10 minutes.
    past = [s["seconds"] / 60 for s in samples if s["event_minutes"] >= 10]
    if past:
        ax.axvline(past[0], color="grey", linestyle=":",
                   label="10 minutes of event time produced (the join's bound)")
    speed = rate * step_ms / 1000
    ax.set_xlabel(
        f"minutes since the service started (input {rate}/s, {speed:g} s of event time a second)"
    )
    ax.set_ylabel("state rows (tidemark_state_rows)")
    ax.set_title(f"Interval join state over {minutes:g} minutes of generated input")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def run_join(args: argparse.Namespace, conf: dict[str, str], bootstrap: str,
             stop: threading.Event) -> None:
    """``--program join``: workload (d) fed at a steady rate, its view's state rows sampled."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from app.observability.listener import TidemarkQueryListener
    from app.observability.metrics import TidemarkMetrics
    from loadtests.generator import PairShape
    from loadtests.workloads import WORKLOADS

    workload = WORKLOADS["d"]
    tag = f"state-join.{int(time.time())}"
    topics = {k: f"{tag}.{k}" for k in ("auctions", "bids", "out")}
    admin = AdminClient({**conf, "log_level": 3})
    for name in ("auctions", "bids"):
        admin.create_topics([NewTopic(topics[name], 2, 1)])[topics[name]].result(30)
    work = Path(tempfile.mkdtemp(prefix="tidemark-state-join-"))
    program = work / "join.sql"
    program.write_text(workload.program.format(**topics))
    circuit = compile_program(program)
    auction, bid = (dict(t.avro_schema) for t in circuit.tables)
    shape = PairShape(auction, bid, keys=workload.keys, lateness_ms=workload.lateness_ms,
                      step_ms=args.step_ms)
    settings = Settings(bootstrap_servers=bootstrap, checkpoint=work / "ck",
                        shuffle_partitions=2, trigger_interval="2000ms", spark_log="console")
    metrics = TidemarkMetrics()
    service = Service(circuit, settings, metrics=metrics)
    listener = TidemarkQueryListener(metrics, service.state_views(),
                                     observe_step_duration=False)
    sent = [0]
    feeder = threading.Thread(
        target=feed_pair,
        args=(conf, (topics["auctions"], topics["bids"]), shape, args.rate, stop, sent),
    )
    try:
        feeder.start()
        service.start(listener=listener)
        started = time.monotonic()
        samples: list[dict[str, Any]] = []
        while time.monotonic() - started < args.minutes * 60:
            time.sleep(args.sample_seconds)
            for q in service.queries:
                if q.exception() is not None:
                    raise q.exception()  # type: ignore[misc]
            rows = metrics.registry.get_sample_value("tidemark_state_rows",
                                                     {"view": "auction_bid"})
            progress = service.queries[0].lastProgress or {}
            sample = {
                "seconds": round(time.monotonic() - started, 1),
                "events": sent[0],
                "event_minutes": round(sent[0] * args.step_ms / 60_000, 2),
                "join": None if rows is None else int(rows),
                "watermark": progress.get("eventTime", {}).get("watermark"),
                "batch": progress.get("batchId"),
                "load": round(os.getloadavg()[0], 2),
            }
            samples.append(sample)
            print(json.dumps(sample), flush=True)
        stop.set()
        feeder.join()
        service.stop()
    finally:
        stop.set()
        service.shutdown()
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps(samples, indent=1))
    samples = [s for s in samples if s["join"] is not None]
    plot_join(samples, args.out_png, args.minutes, args.step_ms, args.rate)

    def at(minute: float) -> dict[str, Any]:
        return min(samples, key=lambda s: abs(s["seconds"] - minute * 60))

    half = [s for s in samples if s["seconds"] >= args.minutes * 30]
    print(
        json.dumps(
            {
                "minutes": args.minutes,
                "events": sent[0],
                "rate": args.rate,
                "step_ms": args.step_ms,
                "at": {m: at(m) for m in (1, 5, 10) if m <= args.minutes},
                "second_half_min": min(s["join"] for s in half),
                "second_half_max": max(s["join"] for s in half),
                "load_min": min(s["load"] for s in samples),
                "load_max": max(s["load"] for s in samples),
                "png": str(args.out_png),
            },
            indent=2,
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--program", choices=("aggregate", "join"), default="aggregate",
                        help="the TUMBLE/unwindowed pair, or workload (d)'s interval join")
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rate", type=int, default=None,
                        help="events per second (default: 200 aggregate, 150 join)")
    parser.add_argument("--session-events", type=int, default=50)
    parser.add_argument("--step-ms", type=int, default=20,
                        help="join: event-time advance per event (ms)")
    parser.add_argument("--sample-seconds", type=float, default=10)
    # Outside the tracked tree by default (var/ is git-ignored); docs/state-bound.md's plots
    # are regenerated with --out-png docs/img/state-bound.png (join-state-bound.png).
    parser.add_argument("--out-png", type=Path, default=None)
    parser.add_argument("--out-json", type=Path, default=None)
    args = parser.parse_args()
    stem = "state-bound" if args.program == "aggregate" else "join-state-bound"
    if args.rate is None:
        args.rate = 200 if args.program == "aggregate" else 150
    if args.out_png is None:
        args.out_png = ROOT / f"var/loadtests/{stem}.png"
    if args.out_json is None:
        args.out_json = ROOT / f"var/loadtests/{stem}.json"
    bootstrap, broker = local_or_given_broker()
    conf = {"bootstrap.servers": bootstrap}
    stop = threading.Event()
    service: Service | None = None
    if args.program == "join":
        try:
            run_join(args, conf, bootstrap, stop)
        finally:
            if broker is not None:
                broker.cleanup()
        return
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
