"""Avro events of a workload to the real broker, at a controlled rate or as fast as possible.

Event time follows a clock that advances ``step_ms`` per event from ``base_ms``; a fraction
``disorder`` of events is moved back by a uniform amount within ``spread_ms`` (out of order, but
inside LATENESS, so accepted), and a fraction ``late`` is moved back by more than the table's
LATENESS plus ``spread_ms`` so the late gate (SPEC L3/S5) routes it to the dead-letter topic
while a plain Spark job's watermark silently drops it. The generator is deterministic for a seed,
so Tidemark and the peer read the same bytes. ``produce(times=...)`` records when each event
was produced, and ``timeline`` regenerates which event it was: the latency probe
(loadtests/latency.py) needs both. The probe produces from a file of events encoded beforehand
(``encode_events``): encoding on the fly took half a core of the two at (b)'s half load,
which the systems under test then lacked. Workload (d)'s two inputs (``PairShape``) have the
same three: ``pair_timeline``, ``encode_pair`` and ``produce_pair``, each event to its input's
topic.
"""

from __future__ import annotations

import argparse
import random
import struct
import time
from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.connectors.avro_codec import AvroCodec

__all__ = [
    "AUCTION",
    "BID",
    "EventShape",
    "PairShape",
    "encode_events",
    "encode_pair",
    "encoded_events",
    "encoded_pair",
    "events",
    "pair_timeline",
    "produce",
    "produce_pair",
    "timeline",
]


@dataclass(frozen=True)
class EventShape:
    """What a workload's events look like."""

    schema: Mapping[str, Any]
    keys: int = 10_000
    disorder: float = 0.05
    spread_ms: int = 5_000
    late: float = 0.01
    lateness_ms: int = 10_000
    step_ms: int = 2  # event-time advance per event: 500 events per event-time second
    base_ms: int = 1_700_000_040_000  # a minute boundary
    seed: int = 7


def _row(shape: EventShape, rnd: random.Random, ts: int) -> dict[str, Any]:
    """One record of the workload schema: ``ts``-like first field, then key and numbers."""
    fields = [f["name"] for f in shape.schema["fields"]]
    key = rnd.randrange(shape.keys)
    row: dict[str, Any] = {}
    for name in fields:
        if name in ("ts", "bidtime"):
            row[name] = ts
        elif name in ("usr", "item"):
            row[name] = f"k{key:06d}"
        elif name in ("n", "price"):
            row[name] = rnd.randrange(1, 1000)
        else:
            raise ValueError(f"generator cannot fill field {name}")
    return row


def timeline(shape: EventShape, count: int) -> Iterator[tuple[int, dict[str, Any], bool]]:
    """(index, row, late) for ``count`` events, in production order; ``late`` marks the events
    moved back past LATENESS + ``spread_ms`` on purpose (the latency probe expects no output
    for them from Tidemark, whose late gate routes them, SPEC S5)."""
    rnd = random.Random(shape.seed)  # noqa: S311 - a benchmark input, not a secret
    clock = shape.base_ms
    for i in range(count):
        clock += shape.step_ms
        ts = clock
        draw = rnd.random()
        late = draw < shape.late
        if late:
            ts = clock - shape.lateness_ms - shape.spread_ms - rnd.randrange(1, 60_000)
        elif draw < shape.late + shape.disorder:
            ts = clock - rnd.randrange(1, shape.spread_ms)
        yield i, _row(shape, rnd, ts), late


def events(shape: EventShape, count: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """(index, row) for ``count`` events, in production order."""
    for i, row, _late in timeline(shape, count):
        yield i, row


_LENGTH = struct.Struct(">I")


def _encoded(shape: EventShape, count: int) -> Iterator[bytes]:
    """The Avro values of the first ``count`` events, in production order."""
    codec = AvroCodec(shape.schema)
    return (codec.encode(row) for _, row in events(shape, count))


def encode_events(shape: EventShape, count: int, path: Path) -> None:
    """The first ``count`` events of ``shape``, Avro-encoded in production order, to ``path``
    (each value after its 4-byte big-endian length): the same bytes :func:`produce` would
    encode, paid for before a measurement starts instead of during it."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb", buffering=1 << 20) as f:
        for value in _encoded(shape, count):
            f.write(_LENGTH.pack(len(value)))
            f.write(value)
    tmp.replace(path)


def encoded_events(path: Path) -> Iterator[bytes]:
    """The values :func:`encode_events` wrote, in order."""
    with open(path, "rb", buffering=1 << 20) as f:
        while head := f.read(4):
            yield f.read(_LENGTH.unpack(head)[0])


def produce(
    conf: Mapping[str, str],
    topic: str,
    shape: EventShape,
    count: int,
    rate: float | None = None,
    stamp: bool = False,
    times: array | None = None,
    stop: Callable[[], bool] | None = None,
    values: Iterator[bytes] | None = None,
) -> float:
    """Produce ``count`` events to ``topic`` (keyed by index, spread over partitions by the
    key's hash); ``rate`` events/s when given, else as fast as the producer goes. ``stamp``
    adds a ``produce_ms`` header (8-byte big-endian wall-clock ms). ``times`` (an
    ``array('d')``) receives each event's produce time, wall-clock ms taken when the event is
    handed to the producer (the latency probe's start of the clock; the producer's linger is
    part of the latency). ``stop``, checked every 100 events, ends production early (the
    probe produces until its measured period is over). ``values``: the events already
    encoded (:func:`encoded_events` of this shape); production ends early when they run
    out. ``conf`` overrides the producer settings below. Returns the seconds it took,
    delivery included."""
    from confluent_kafka import Producer

    if values is None:
        values = _encoded(shape, count)
    producer = Producer(
        {
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "none",
            "log_level": 3,
            **conf,
        }
    )
    started = time.monotonic()
    for i, value in enumerate(values):
        if i >= count or (stop is not None and i % 100 == 0 and stop()):
            break
        if rate is not None:
            due = started + i / rate
            ahead = due - time.monotonic()
            # Sleep in steps of a millisecond or more: a sleep per event (tens of thousands
            # a second) cost the generator more CPU than producing; each event's time is
            # taken when it is handed over all the same.
            if ahead > 0.001:
                time.sleep(ahead)
        now_ms = time.time() * 1000
        if times is not None:
            times.append(now_ms)
        headers = [("produce_ms", struct.pack(">q", int(now_ms)))] if stamp else None
        while True:
            try:
                producer.produce(topic, value, key=str(i).encode(), headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(120)
    return time.monotonic() - started


AUCTION, BID = 0, 1  # which input of a :class:`PairShape` an event goes to


@dataclass(frozen=True)
class PairShape:
    """NEXMark-style auctions and the bids on them, two inputs of one workload (d).

    One event in ``bids_per_auction + 1`` opens an auction, the others bid. Auction ids cycle
    over ``keys``; ``step_ms`` is long enough that an id comes back only after the join's
    ``bound_ms`` and the disorder have passed (``keys * (bids_per_auction + 1) * step_ms``
    beyond ``bound_ms + spread_ms``), so a bid on time matches the one auction it names. A bid
    names one of the ``recent`` auctions opened last, so most bids fall within their auction's
    bound. Each side has the same ``disorder`` and ``late`` fractions as :class:`EventShape`."""

    auction_schema: Mapping[str, Any]
    bid_schema: Mapping[str, Any]
    keys: int = 10_000
    bids_per_auction: int = 10
    recent: int = 1_000
    bound_ms: int = 600_000
    disorder: float = 0.05
    spread_ms: int = 5_000
    late: float = 0.01
    lateness_ms: int = 10_000
    step_ms: int = 6
    base_ms: int = 1_700_000_040_000
    seed: int = 7


def pair_timeline(shape: PairShape, count: int) -> Iterator[tuple[int, int, dict[str, Any], bool]]:
    """(index, input, row, late) for ``count`` events in production order; ``input`` is
    :data:`AUCTION` or :data:`BID`, ``late`` as in :func:`timeline`."""
    rnd = random.Random(shape.seed)  # noqa: S311 - a benchmark input, not a secret
    clock = shape.base_ms
    opened = 0  # auctions opened so far
    for i in range(count):
        clock += shape.step_ms
        ts = clock
        draw = rnd.random()
        late = draw < shape.late
        if late:
            ts = clock - shape.lateness_ms - shape.spread_ms - rnd.randrange(1, 60_000)
        elif draw < shape.late + shape.disorder:
            ts = clock - rnd.randrange(1, shape.spread_ms)
        if i % (shape.bids_per_auction + 1) == 0:
            row = {
                "id": opened % shape.keys,
                "seller": rnd.randrange(1, 100_000),
                "category": rnd.randrange(10, 20),
                "date_time": ts,
                "expires": ts + shape.bound_ms,
            }
            opened += 1
            yield i, AUCTION, row, late
        else:
            named = max(0, opened - 1 - rnd.randrange(shape.recent))
            row = {
                "auction": named % shape.keys,
                "bidder": rnd.randrange(1, 100_000),
                "price": rnd.randrange(1, 10_000),
                "date_time": ts,
            }
            yield i, BID, row, late


_INPUT_AND_LENGTH = struct.Struct(">BI")


def encode_pair(shape: PairShape, count: int, path: Path) -> None:
    """The first ``count`` events of ``shape``, each Avro-encoded with its input's schema in
    production order, to ``path``: per event its input (one byte, :data:`AUCTION` or
    :data:`BID`) and its value's 4-byte big-endian length, then the value. The bytes
    :func:`produce_pair` would encode, as :func:`encode_events` for one input."""
    codecs = (AvroCodec(shape.auction_schema), AvroCodec(shape.bid_schema))
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb", buffering=1 << 20) as f:
        for _, side, row, _late in pair_timeline(shape, count):
            value = codecs[side].encode(row)
            f.write(_INPUT_AND_LENGTH.pack(side, len(value)))
            f.write(value)
    tmp.replace(path)


def encoded_pair(path: Path) -> Iterator[tuple[int, bytes]]:
    """The (input, value) pairs :func:`encode_pair` wrote, in order."""
    with open(path, "rb", buffering=1 << 20) as f:
        while head := f.read(_INPUT_AND_LENGTH.size):
            side, length = _INPUT_AND_LENGTH.unpack(head)
            yield side, f.read(length)


def _encoded_pair(shape: PairShape) -> Iterator[tuple[int, bytes]]:
    """(input, Avro value) of each event of ``shape``, in production order, without end."""
    codecs = (AvroCodec(shape.auction_schema), AvroCodec(shape.bid_schema))
    return ((side, codecs[side].encode(row)) for _, side, row, _late in pair_timeline(shape, 2**62))


def produce_pair(
    conf: Mapping[str, str],
    topics: tuple[str, str],
    shape: PairShape,
    count: int,
    rate: float | None = None,
    times: array | None = None,
    stop: Callable[[], bool] | None = None,
    values: Iterator[tuple[int, bytes]] | None = None,
) -> float:
    """Produce the ``count`` events of ``shape``, each Avro-encoded to its input's topic
    (``topics``: auctions, bids), keyed by index as :func:`produce` does, in production
    order: one sequence over both topics. ``rate``, ``times``, ``stop`` as for
    :func:`produce`, over the events of both inputs together; ``values``: the events already
    encoded (:func:`encoded_pair` of this shape). Returns the seconds it took, delivery
    included."""
    from confluent_kafka import Producer

    if values is None:
        values = _encoded_pair(shape)
    producer = Producer(
        {
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "none",
            "log_level": 3,
            **conf,
        }
    )
    started = time.monotonic()
    for i, (side, value) in enumerate(values):
        if i >= count or (stop is not None and i % 100 == 0 and stop()):
            break
        if rate is not None:
            ahead = started + i / rate - time.monotonic()
            if ahead > 0.001:  # in steps of a millisecond or more, as in produce()
                time.sleep(ahead)
        if times is not None:
            times.append(time.time() * 1000)
        while True:
            try:
                producer.produce(topics[side], value, key=str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(120)
    return time.monotonic() - started


def main() -> None:
    import json
    from pathlib import Path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--schema", default="schemas/click.avsc")
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=None)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--disorder", type=float, default=0.05)
    parser.add_argument("--late", type=float, default=0.01)
    args = parser.parse_args()
    shape = EventShape(
        json.loads(Path(args.schema).read_text()), args.keys, args.disorder, late=args.late
    )
    seconds = produce(
        {"bootstrap.servers": args.bootstrap_servers}, args.topic, shape, args.count, args.rate
    )
    print(f"{args.count} events in {seconds:.1f} s ({args.count / seconds:,.0f}/s)")


if __name__ == "__main__":
    main()
