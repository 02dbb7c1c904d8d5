"""Bounded state (SPEC S11): a TUMBLE view's state is flat, an unwindowed GROUP BY grows;
an interval join's state and a SESSION aggregate's state level off.

``--program aggregate`` (the default): two tables are fed the same generated events (one
producer writes each event to both topics), so each has its own streaming query and its own
stateful operator:

- ``tw``: ``TUMBLE(ts, 10 s)`` ``COUNT(*)/SUM(n)`` per ``sid``, default EMIT (upsert): groups
  are freed once the waterline passes ``window_end`` (S11);
- ``tg``: ``COUNT(*)/SUM(n)`` per ``sid`` with no window: one group per session id ever seen
  (L7 warns about exactly this).

Events: ``--rate`` per second of wall clock, event time = wall clock (out of order by up to 2 s,
lateness 5 s); ``sid`` is a session id, a new one every ``--session-events`` events, each
event drawn from the ~20 most recent, so the key space keeps growing like user sessions do.
Every ``--sample-seconds`` the script reads
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

``--program session``: one table of clicks, the aggregate program's events with ``sid``
naming a user, and one view: ``SESSION`` windows of a 10 s gap per user, ``COUNT(*)`` and
``MAX(ts)``, ``EMIT AFTER WATERMARK`` (Spark's ``session_window``). A visit is what the
aggregate program calls a session (a new one every ``--session-events`` events, a click goes
to one of the ~20 most recent, so a visit lasts about 7 s at 150/s); most visits are a new
user's, one in four is the return of a user last seen at least a minute earlier (``Users``).
So each user's clicks form sessions that end, and the users seen keep growing. Every
``--sample-seconds`` the script reads the ``tidemark_state_rows{view="visits"}`` gauge, the
users seen so far and ``tidemark_output_records_total{view="visits"}`` (sessions written).

``--program topn``: one table, the aggregate program's events, and one window Top-N view:
per 10-second TUMBLE window and ``sid``, the 3 events with the largest ``n`` (``ROW_NUMBER()
OVER (PARTITION BY window_start, window_end, sid ORDER BY n DESC)``, ``rownum <= 3``),
held in Spark's state as the best 3 rows per window and ``sid`` (ADR 0020) and written when
the window closes. The session ids keep coming, so the partitions seen keep growing; every
``--sample-seconds`` the script reads the ``tidemark_state_rows{view="top_events"}`` gauge,
the session ids seen and ``tidemark_output_records_total{view="top_events"}``.

``--program over``: the session program's events (``sid`` a user, the users seen keep
growing) and one view: per user, ``SUM(n)`` and ``COUNT(*)`` of the last two minutes on
every event (``RANGE BETWEEN INTERVAL '2' MINUTE PRECEDING AND CURRENT ROW``, Tidemark's
OVER operator). ``tidemark_state_rows{view="recent"}`` counts the operator's slots, so every
``--sample-seconds`` the script reads the rows held from the slots' state documents in the
checkpoint (:func:`held_rows`), with the gauge, the users seen and the rows written.

All programs also record each step's duration (``durationMs.triggerExecution`` of the
progress events) for the summary printed at the end.

    .venv/bin/python loadtests/state_bound.py --minutes 10
    .venv/bin/python loadtests/state_bound.py --program join --minutes 10
    .venv/bin/python loadtests/state_bound.py --program session --minutes 10
    .venv/bin/python loadtests/state_bound.py --program topn --minutes 10
    .venv/bin/python loadtests/state_bound.py --program over --minutes 10

Uses ``KAFKA_BOOTSTRAP_SERVERS`` when set, else starts the local broker.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, Python puts loadtests/ first on sys.path, where other load tests' modules
# (profile.py) shadow the standard library: put the project root there instead.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(ROOT)
else:
    sys.path.insert(0, str(ROOT))

from app.circuit.ir import Circuit  # noqa: E402
from app.config import Settings  # noqa: E402
from app.connectors.avro_codec import AvroCodec  # noqa: E402
from app.observability.listener import TidemarkQueryListener  # noqa: E402
from app.observability.metrics import TidemarkMetrics  # noqa: E402
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

#: ``--program session``: here ``sid`` names a user; a session ends 10 s after its last click.
SESSION_PROGRAM = (
    TABLE.format(name="clicks", topic="{clicks}")
    + """
CREATE VIEW visits WITH ('topic' = '{out}') AS
SELECT sid, window_start, window_end, COUNT(*) AS clicks, MAX(ts) AS last_click
FROM TABLE(SESSION(TABLE clicks PARTITION BY sid, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY sid, window_start, window_end
EMIT AFTER WATERMARK;
"""
)

#: ``--program topn``: the 3 largest ``n`` per 10-second window and session id (ADR 0020).
TOP_N_PROGRAM = (
    TABLE.format(name="events", topic="{events}")
    + """
CREATE VIEW top_events WITH ('topic' = '{out}') AS
SELECT window_end, sid, n, ts, rownum FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end, sid
                               ORDER BY n DESC) AS rownum
  FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '10' SECOND)))
WHERE rownum <= 3;
"""
)

#: ``--program over``: per user (``sid``), the sum and count of its events of the last two
#: minutes, on every event (OVER aggregates, ADR 0019).
OVER_PROGRAM = (
    TABLE.format(name="ev", topic="{ev}")
    + """
CREATE VIEW recent WITH ('topic' = '{out}') AS
SELECT sid, ts, n, SUM(n) OVER w AS total, COUNT(*) OVER w AS events
FROM ev
WINDOW w AS (PARTITION BY sid ORDER BY ts
             RANGE BETWEEN INTERVAL '2' MINUTE PRECEDING AND CURRENT ROW);
"""
)

#: The Avro record of :data:`TABLE`'s rows.
EVENT_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "ev",
    "fields": [
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "sid", "type": "long"},
        {"name": "n", "type": "long"},
    ],
}

Emit = Callable[[Any, int], None]
"""Produces event ``i`` (counted from 0) with the confluent-kafka producer it is given."""


def feed_steadily(
    conf: dict[str, str], rate: int, emit: Emit, stop: threading.Event, sent: list[int]
) -> None:
    """``emit`` events at ``rate`` per second of wall clock until ``stop``; ``sent[0]`` counts
    the events produced so far."""
    from confluent_kafka import Producer

    producer = Producer({**conf, "linger.ms": 50, "log_level": 3})
    started = time.monotonic()
    i = 0
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate)
        while i < due:
            emit(producer, i)
            i += 1
        producer.poll(0)
        sent[0] = i
        time.sleep(0.05)
    producer.flush(30)


def recent_session(rng: random.Random, i: int, session_events: int) -> int:
    """The session id of event ``i``: one of the ~20 most recent sessions, a new one every
    ``session_events`` events."""
    live = max(1, i // session_events)
    return rng.randint(max(0, live - 20), live)


class Users:
    """The user of each session of :func:`recent_session` (a visit): a new user's, or, with
    probability ``returning``, that of the user of a session ``back`` to ``2 * back``
    sessions earlier (at 150 events/s and a new session every 50 events, 200 sessions are
    67 s: that user's clicks stopped long before). ``seen`` counts the users who clicked."""

    def __init__(self, returning: float = 0.25, back: int = 200, seed: int = 5) -> None:
        self._rng = random.Random(seed)
        self._returning = returning
        self._back = back
        self._of: list[int] = []  # the user of each session so far
        self._users = 0
        self._seen: set[int] = set()

    def __call__(self, session: int) -> int:
        while len(self._of) <= session:
            s = len(self._of)
            if s >= self._back and self._rng.random() < self._returning:
                earlier = s - self._rng.randint(self._back, min(s, 2 * self._back))
                self._of.append(self._of[earlier])
            else:
                self._of.append(self._users)
                self._users += 1
        user = self._of[session]
        self._seen.add(user)
        return user

    @property
    def seen(self) -> int:
        return len(self._seen)


def events(
    topics: Sequence[str], session_events: int, user: Callable[[int], int] | None = None
) -> Emit:
    """:data:`TABLE`'s events, each produced to every topic of ``topics``: event time = wall
    clock less up to 2 s, ``sid`` the :func:`recent_session` (or its ``user``), ``n`` 0-9."""
    codec = AvroCodec(EVENT_SCHEMA)
    rng = random.Random(11)

    def emit(producer: Any, i: int) -> None:
        now_ms = int(time.time() * 1000)
        sid = recent_session(rng, i, session_events)
        value = codec.encode(
            {
                "ts": now_ms - rng.randint(0, 2000),
                "sid": sid if user is None else user(sid),
                "n": rng.randint(0, 9),
            }
        )
        for topic in topics:
            producer.produce(topic, value=value, partition=i % 2)

    return emit


def pair_events(topics: tuple[str, str], shape: Any) -> Emit:
    """The events of ``pair_timeline(shape)``, each to its input's topic (auctions, bids)."""
    from loadtests.generator import pair_timeline

    codecs = (AvroCodec(shape.auction_schema), AvroCodec(shape.bid_schema))
    timeline = pair_timeline(shape, 1 << 40)

    def emit(producer: Any, i: int) -> None:
        _, side, row, _late = next(timeline)
        producer.produce(topics[side], value=codecs[side].encode(row), key=str(i).encode())

    return emit


def state_rows(query: Any) -> int | None:
    progress = query.lastProgress
    if not progress:
        return None
    return sum(int(op.get("numRowsTotal", 0)) for op in progress.get("stateOperators", []))


class StepListener(TidemarkQueryListener):
    """The service's query listener, also keeping each step's duration (seconds, by query
    id and batch id) from the progress events."""

    def __init__(self, metrics: TidemarkMetrics, service: Service) -> None:
        super().__init__(metrics, service.state_views(), observe_step_duration=False)
        self.steps: dict[tuple[str, int], float] = {}

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802 - Spark's name
        super().onQueryProgress(event)
        progress = event.progress
        ms = progress.durationMs.get("triggerExecution")
        if ms is not None:
            self.steps[(str(progress.id), progress.batchId)] = ms / 1000


class Run:
    """One program of the script: its topics, its service with the query listener, fed at
    ``args.rate`` events a second while it is sampled every ``args.sample_seconds``."""

    def __init__(
        self,
        args: argparse.Namespace,
        conf: dict[str, str],
        bootstrap: str,
        name: str,
        program: str,
        inputs: Sequence[str],
        outputs: Sequence[str],
    ) -> None:
        """Create the ``inputs``' topics and compile ``program``, formatted with the topic
        of each input and output."""
        from confluent_kafka.admin import AdminClient, NewTopic

        self.args = args
        self.conf = conf
        tag = f"{name}.{int(time.time())}"
        self.topics = {k: f"{tag}.{k}" for k in (*inputs, *outputs)}
        admin = AdminClient({**conf, "log_level": 3})
        for k in inputs:
            admin.create_topics([NewTopic(self.topics[k], 2, 1)])[self.topics[k]].result(30)
        work = Path(tempfile.mkdtemp(prefix=f"tidemark-{name}-"))
        source = work / f"{name}.sql"
        source.write_text(program.format(**self.topics))
        self.circuit: Circuit = compile_program(source)
        settings = Settings(bootstrap_servers=bootstrap, checkpoint=work / "ck",
                            shuffle_partitions=2, trigger_interval="2000ms", spark_log="console")
        self.metrics = TidemarkMetrics()
        self.service = Service(self.circuit, settings, metrics=self.metrics)
        self.sent = [0]
        self.samples: list[dict[str, Any]] = []
        self.steps: list[float] = []
        self.first_steps: list[float] = []  # each query's first step, which reads a backlog

    def query(self, name: str) -> Any:
        """The running streaming query ``name`` (``tidemark-<table>``)."""
        return next(q for q in self.service.queries if q.name == name)

    def gauge(self, name: str, **labels: str) -> int | None:
        value = self.metrics.registry.get_sample_value(name, labels)
        return None if value is None else int(value)

    def run(self, emit: Emit, sample: Callable[[], dict[str, Any]]) -> None:
        """Feed ``emit``'s events (from before the service starts, so its first step reads a
        backlog), sample for ``args.minutes``, stop, and write the samples to
        ``args.out_json``; each sample is ``sample()`` with the time, events sent, the first
        query's watermark and batch, and the load average."""
        args = self.args
        stop = threading.Event()
        listener = StepListener(self.metrics, self.service)
        feeder = threading.Thread(
            target=feed_steadily, args=(self.conf, args.rate, emit, stop, self.sent)
        )
        try:
            feeder.start()
            self.service.start(listener=listener)
            started = time.monotonic()
            while time.monotonic() - started < args.minutes * 60:
                time.sleep(args.sample_seconds)
                for q in self.service.queries:
                    if q.exception() is not None:
                        raise q.exception()  # type: ignore[misc]
                progress: Any = self.service.queries[0].lastProgress or {}
                row = {
                    "seconds": round(time.monotonic() - started, 1),
                    "events": self.sent[0],
                    **sample(),
                    "watermark": progress.get("eventTime", {}).get("watermark"),
                    "batch": progress.get("batchId"),
                    "load": round(os.getloadavg()[0], 2),
                }
                self.samples.append(row)
                print(json.dumps(row), flush=True)
            stop.set()
            feeder.join()
            self.service.stop()
        finally:
            stop.set()
            self.service.shutdown()  # stop Spark before the broker it reads goes away
        self.steps = [s for _, s in sorted(listener.steps.items())]
        self.first_steps = [s for (_, batch), s in listener.steps.items() if batch == 0]
        args.out_json.parent.mkdir(parents=True, exist_ok=True)
        args.out_json.write_text(json.dumps(self.samples, indent=1))

    def summary(self, **figures: Any) -> None:
        """Print the run's figures: ``figures`` with the input, the steps and the load."""
        steps = self.steps
        print(
            json.dumps(
                {
                    "minutes": self.args.minutes,
                    "events": self.sent[0],
                    "rate": self.args.rate,
                    **figures,
                    "steps": {
                        "count": len(steps),
                        "first_s": max(self.first_steps, default=None),
                        "min_s": min(steps, default=None),
                        "median_s": statistics.median(steps) if steps else None,
                        "max_s": max(steps, default=None),
                    },
                    "load_min": min(s["load"] for s in self.samples),
                    "load_max": max(s["load"] for s in self.samples),
                    "png": str(self.args.out_png),
                },
                indent=2,
            )
        )


def figure() -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(8, 4.5))


def save(fig: Any, ax: Any, path: Path, title: str, legend_loc: str = "best") -> None:
    """Title and grid ``ax``; one legend for the lines of every axis (a twin's too), drawn
    on the top one."""
    ax.set_title(title)
    ax.grid(alpha=0.3)
    handles = [h for a in fig.axes for h in a.get_legend_handles_labels()[0]]
    fig.axes[-1].legend(handles=handles, loc=legend_loc)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def plot(samples: list[dict[str, Any]], path: Path, minutes: float) -> None:
    fig, ax = figure()
    t = [s["seconds"] / 60 for s in samples]
    ax.plot(t, [s["tumble"] for s in samples], label="TUMBLE 10 s view (state freed per S11)")
    ax.plot(t, [s["unwindowed"] for s in samples], label="unwindowed GROUP BY sid")
    ax.set_xlabel("minutes of input")
    ax.set_ylabel("state rows (Spark stateOperators.numRowsTotal)")
    save(fig, ax, path, f"Tidemark state over {minutes:g} minutes of generated input")


def plot_join(samples: list[dict[str, Any]], path: Path, minutes: float, step_ms: int,
              rate: int) -> None:
    fig, ax = figure()
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
    ax.set_ylim(bottom=0)
    save(fig, ax, path, f"Interval join state over {minutes:g} minutes of generated input",
         legend_loc="lower right")


def plot_session(samples: list[dict[str, Any]], path: Path, minutes: float, rate: int) -> None:
    """State rows on the left axis; users seen and sessions written, which keep growing, on
    the right one."""
    fig, ax = figure()
    t = [s["seconds"] / 60 for s in samples]
    ax.plot(t, [s["state"] for s in samples], color="C0",
            label="state rows of the SESSION view (left axis)")
    ax.set_xlabel(f"minutes since the service started (input {rate} clicks/s)")
    ax.set_ylabel("state rows (tidemark_state_rows)")
    ax.set_ylim(0, 1.6 * max((s["state"] for s in samples), default=1))  # room for the legend
    right = ax.twinx()
    right.plot(t, [s["users"] for s in samples], color="C1", linestyle="--",
               label="users seen (right axis)")
    right.plot(t, [s["sessions"] for s in samples], color="C2", linestyle="-.",
               label="sessions written (right axis)")
    right.set_ylabel("users, sessions")
    right.set_ylim(bottom=0)
    save(fig, ax, path,
         f"SESSION window state (10 s gap) over {minutes:g} minutes of generated clicks",
         legend_loc="upper left")


def plot_top_n(samples: list[dict[str, Any]], path: Path, minutes: float, rate: int) -> None:
    """State rows on the left axis; session ids seen and rows written, which keep growing,
    on the right one."""
    fig, ax = figure()
    t = [s["seconds"] / 60 for s in samples]
    ax.plot(t, [s["state"] for s in samples], color="C0",
            label="state rows of the Top-N view (left axis)")
    ax.set_xlabel(f"minutes since the service started (input {rate} events/s)")
    ax.set_ylabel("state rows (tidemark_state_rows)")
    ax.set_ylim(0, 1.6 * max((s["state"] for s in samples), default=1))  # room for the legend
    right = ax.twinx()
    right.plot(t, [s["sids"] for s in samples], color="C1", linestyle="--",
               label="session ids seen (right axis)")
    right.plot(t, [s["written"] for s in samples], color="C2", linestyle="-.",
               label="Top-N rows written (right axis)")
    right.set_ylabel("session ids, rows")
    right.set_ylim(bottom=0)
    save(fig, ax, path,
         f"Window Top-N state (best 3 per 10 s window and sid) over {minutes:g} minutes",
         legend_loc="upper left")


def run_aggregate(args: argparse.Namespace, conf: dict[str, str], bootstrap: str) -> None:
    """``--program aggregate``: the TUMBLE view and the unwindowed one, each its own query."""
    run = Run(args, conf, bootstrap, "state", PROGRAM, ("tw", "tg"), ("out_w", "out_g"))
    run.run(
        events([run.topics["tw"], run.topics["tg"]], args.session_events),
        lambda: {
            "tumble": state_rows(run.query("tidemark-tw")),
            "unwindowed": state_rows(run.query("tidemark-tg")),
        },
    )
    samples = [s for s in run.samples if s["tumble"] is not None and s["unwindowed"] is not None]
    plot(samples, args.out_png, args.minutes)
    half = [s for s in samples if s["seconds"] >= args.minutes * 30]
    run.summary(
        tumble_second_half_min=min(s["tumble"] for s in half),
        tumble_second_half_max=max(s["tumble"] for s in half),
        unwindowed_at_half=half[0]["unwindowed"],
        unwindowed_final=samples[-1]["unwindowed"],
    )


def at(samples: list[dict[str, Any]], minutes: float) -> list[dict[str, Any]]:
    """The samples nearest to each whole minute 1, 2, 5 and 10 of the run (those it lasted)."""
    return [
        min(samples, key=lambda s: abs(s["seconds"] - m * 60))
        for m in (1, 2, 5, 10) if m <= minutes
    ]


def run_join(args: argparse.Namespace, conf: dict[str, str], bootstrap: str) -> None:
    """``--program join``: workload (d) fed at a steady rate, its view's state rows sampled."""
    from loadtests.generator import PairShape
    from loadtests.workloads import WORKLOADS

    workload = WORKLOADS["d"]
    run = Run(args, conf, bootstrap, "state-join", workload.program, ("auctions", "bids"),
              ("out",))
    auction, bid = (dict(t.avro_schema) for t in run.circuit.tables)
    shape = PairShape(auction, bid, keys=workload.keys, lateness_ms=workload.lateness_ms,
                      step_ms=args.step_ms)
    run.run(
        pair_events((run.topics["auctions"], run.topics["bids"]), shape),
        lambda: {
            "event_minutes": round(run.sent[0] * args.step_ms / 60_000, 2),
            "join": run.gauge("tidemark_state_rows", view="auction_bid"),
        },
    )
    samples = [s for s in run.samples if s["join"] is not None]
    plot_join(samples, args.out_png, args.minutes, args.step_ms, args.rate)
    half = [s for s in samples if s["seconds"] >= args.minutes * 30]
    run.summary(
        step_ms=args.step_ms,
        at=at(samples, args.minutes),
        second_half_min=min(s["join"] for s in half),
        second_half_max=max(s["join"] for s in half),
    )


def run_session(args: argparse.Namespace, conf: dict[str, str], bootstrap: str) -> None:
    """``--program session``: a SESSION aggregate per user of clicks whose users keep coming."""
    run = Run(args, conf, bootstrap, "state-session", SESSION_PROGRAM, ("clicks",), ("out",))
    users = Users()
    run.run(
        events([run.topics["clicks"]], args.session_events, users),
        lambda: {
            "state": run.gauge("tidemark_state_rows", view="visits"),
            "users": users.seen,
            "sessions": run.gauge("tidemark_output_records_total", view="visits",
                                  topic=run.topics["out"]),
        },
    )
    samples = [s for s in run.samples if s["state"] is not None]
    plot_session(samples, args.out_png, args.minutes, args.rate)
    half = [s for s in samples if s["seconds"] >= args.minutes * 30]
    run.summary(
        at=at(samples, args.minutes),
        state_final=samples[-1]["state"],
        state_max=max(s["state"] for s in samples),
        state_second_half_min=min(s["state"] for s in half),
        state_second_half_max=max(s["state"] for s in half),
        users_seen=users.seen,
        sessions_written=samples[-1]["sessions"],
    )


def run_top_n(args: argparse.Namespace, conf: dict[str, str], bootstrap: str) -> None:
    """``--program topn``: a window Top-N per session id, whose ids keep coming."""
    run = Run(args, conf, bootstrap, "state-topn", TOP_N_PROGRAM, ("events",), ("out",))
    run.run(
        events([run.topics["events"]], args.session_events),
        lambda: {
            "state": run.gauge("tidemark_state_rows", view="top_events"),
            "sids": run.sent[0] // args.session_events + 1,
            "written": run.gauge("tidemark_output_records_total", view="top_events",
                                 topic=run.topics["out"]),
        },
    )
    samples = [s for s in run.samples if s["state"] is not None]
    plot_top_n(samples, args.out_png, args.minutes, args.rate)
    half = [s for s in samples if s["seconds"] >= args.minutes * 30]
    run.summary(
        at=at(samples, args.minutes),
        state_final=samples[-1]["state"],
        state_max=max(s["state"] for s in samples),
        state_second_half_min=min(s["state"] for s in half),
        state_second_half_max=max(s["state"] for s in half),
        sids_seen=samples[-1]["sids"],
        rows_written=samples[-1]["written"],
    )


def held_rows(spark: Any, checkpoint: Path) -> int | None:
    """The rows the OVER operator holds after the last committed step, read from its slots'
    state documents in the checkpoint (Spark's state data source, value state ``slot``):
    ``tidemark_state_rows`` counts the slots (ADR 0019)."""
    from app.runtime.operators.over_slots import rows_held

    try:
        frame = spark.read.format("statestore").option("stateVarName", "slot").load(
            str(checkpoint))
        docs = [row["value"]["doc"] for row in frame.select("value").collect()]
    except Exception as exc:  # noqa: BLE001 - no committed state yet is a sample to skip
        print(json.dumps({"held_rows": "unread", "error": str(exc).splitlines()[0]}))
        return None
    return sum(rows_held(json.loads(doc)) for doc in docs)


def plot_over(samples: list[dict[str, Any]], path: Path, minutes: float, rate: int) -> None:
    """Rows held on the left axis; users seen and rows written, which keep growing, on the
    right one."""
    fig, ax = figure()
    t = [s["seconds"] / 60 for s in samples]
    ax.plot(t, [s["held"] for s in samples], color="C0",
            label="rows held by the OVER operator (left axis)")
    ax.set_xlabel(f"minutes since the service started (input {rate} events/s)")
    ax.set_ylabel("rows held (the slots' state documents)")
    ax.set_ylim(0, 1.6 * max((s["held"] for s in samples), default=1))  # room for the legend
    right = ax.twinx()
    right.plot(t, [s["users"] for s in samples], color="C1", linestyle="--",
               label="users (partitions) seen (right axis)")
    right.plot(t, [(s["written"] or 0) / 100 for s in samples], color="C2", linestyle="-.",
               label="rows written / 100 (right axis)")
    right.set_ylabel("users, rows written / 100")
    right.set_ylim(bottom=0)
    save(fig, ax, path,
         f"OVER state (RANGE 2 minutes per user) over {minutes:g} minutes of generated events",
         legend_loc="upper left")


def run_over(args: argparse.Namespace, conf: dict[str, str], bootstrap: str) -> None:
    """``--program over``: a RANGE OVER view per user of events whose users keep coming."""
    run = Run(args, conf, bootstrap, "state-over", OVER_PROGRAM, ("ev",), ("out",))
    users = Users()
    checkpoint = run.service.checkpoint / "ev" / "spark"
    run.run(
        events([run.topics["ev"]], args.session_events, users),
        lambda: {
            "held": held_rows(run.service.open_session(), checkpoint),
            "slots": run.gauge("tidemark_state_rows", view="recent"),
            "users": users.seen,
            "written": run.gauge("tidemark_output_records_total", view="recent",
                                 topic=run.topics["out"]),
        },
    )
    samples = [s for s in run.samples if s["held"] is not None]
    plot_over(samples, args.out_png, args.minutes, args.rate)
    half = [s for s in samples if s["seconds"] >= args.minutes * 30]
    run.summary(
        at=at(samples, args.minutes),
        held_final=samples[-1]["held"],
        held_max=max(s["held"] for s in samples),
        held_second_half_min=min(s["held"] for s in half),
        held_second_half_max=max(s["held"] for s in half),
        slots_final=samples[-1]["slots"],
        users_seen=users.seen,
        written=samples[-1]["written"],
    )


PROGRAMS: dict[str, tuple[Callable[[argparse.Namespace, dict[str, str], str], None], str, int]] = {
    "aggregate": (run_aggregate, "state-bound", 200),
    "join": (run_join, "join-state-bound", 150),
    "session": (run_session, "session-state-bound", 150),
    "topn": (run_top_n, "topn-state-bound", 150),
    "over": (run_over, "over-state-bound", 150),
}
"""Per ``--program``: how it runs, the stem of its output files, its default rate."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--program", choices=tuple(PROGRAMS), default="aggregate",
                        help="the TUMBLE/unwindowed pair, workload (d)'s interval join, "
                        "a SESSION aggregate per user, a window Top-N per session id, or an "
                        "OVER view per user")
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rate", type=int, default=None,
                        help="events per second (default: 200 aggregate, 150 the others)")
    parser.add_argument("--session-events", type=int, default=50)
    parser.add_argument("--step-ms", type=int, default=20,
                        help="join: event-time advance per event (ms)")
    parser.add_argument("--sample-seconds", type=float, default=10)
    # Outside the tracked tree by default (var/ is git-ignored); docs/state-bound.md's plots
    # are regenerated with --out-png docs/img/state-bound.png (join-state-bound.png,
    # session-state-bound.png, topn-state-bound.png, over-state-bound.png).
    parser.add_argument("--out-png", type=Path, default=None)
    parser.add_argument("--out-json", type=Path, default=None)
    args = parser.parse_args()
    run, stem, rate = PROGRAMS[args.program]
    if args.rate is None:
        args.rate = rate
    if args.out_png is None:
        args.out_png = ROOT / f"var/loadtests/{stem}.png"
    if args.out_json is None:
        args.out_json = ROOT / f"var/loadtests/{stem}.json"
    bootstrap, broker = local_or_given_broker()
    try:
        run(args, {"bootstrap.servers": bootstrap}, bootstrap)
    finally:
        if broker is not None:
            broker.cleanup()


if __name__ == "__main__":
    main()
