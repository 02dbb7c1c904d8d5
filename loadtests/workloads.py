"""The benchmark workloads (docs/performance.md), each as a Tidemark program and as
the plain Spark job a user would write instead (JVM Kafka source, from_avro, withWatermark,
groupBy(window).agg, to_avro, Kafka sink). Same input bytes, same output rows for accepted
events; the peer drops late events silently (its watermark) or, stateless, does not notice
them, where Tidemark routes them (S5)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ONE_INPUT", "WORKLOADS", "Workload"]

_CLICKS = """
CREATE TABLE clicks (
    ts   TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    usr  VARCHAR   NOT NULL,
    n    INT       NOT NULL
) WITH ('topic' = '{topic}');
"""

_BIDS = """
CREATE TABLE bid (
    bidtime TIMESTAMP NOT NULL LATENESS INTERVAL '4' MINUTE,
    price   BIGINT    NOT NULL,
    item    VARCHAR   NOT NULL
) WITH ('topic' = '{topic}');
"""


_AUCTIONS_AND_BIDS = """
CREATE TABLE auction (
    id        BIGINT    NOT NULL,
    seller    BIGINT    NOT NULL,
    category  BIGINT    NOT NULL,
    date_time TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND,
    expires   TIMESTAMP NOT NULL
) WITH ('topic' = '{auctions}');

CREATE TABLE bid (
    auction   BIGINT    NOT NULL,
    bidder    BIGINT    NOT NULL,
    price     BIGINT    NOT NULL,
    date_time TIMESTAMP NOT NULL LATENESS INTERVAL '10' SECOND
) WITH ('topic' = '{bids}');
"""


#: The join of (d) and (e): ``{kind}`` is "" (INNER) or "LEFT ".
_AUCTION_BID = (
    "CREATE VIEW auction_bid WITH ('topic' = '{{out}}', 'format' = 'append') AS\n"
    "SELECT b.date_time, b.auction, b.bidder, b.price, a.seller, a.category,\n"
    "       a.date_time AS auction_time\n"
    "FROM auction AS a\n{kind}JOIN bid AS b\n  ON a.id = b.auction\n"
    " AND b.date_time BETWEEN a.date_time AND a.date_time + INTERVAL '10' MINUTE;\n"
)
#: (f): a per-minute count over (d)'s join, which one query cannot compute beside the join:
#: the join is written to an internal topic and read back by a second query (ADR 0023).
_AUCTION_BID_PER_MINUTE = (
    "CREATE LOCAL VIEW auction_bid AS\n"
    "SELECT b.date_time, b.price, a.category\n"
    "FROM auction AS a\nJOIN bid AS b\n  ON a.id = b.auction\n"
    " AND b.date_time BETWEEN a.date_time AND a.date_time + INTERVAL '10' MINUTE;\n"
    "CREATE VIEW per_category WITH ('topic' = '{out}', 'format' = 'append') AS\n"
    "SELECT window_start, window_end, category, COUNT(*) AS bids, MAX(price) AS top\n"
    "FROM TABLE(TUMBLE(TABLE auction_bid, DESCRIPTOR(date_time), INTERVAL '1' MINUTE))\n"
    "GROUP BY window_start, window_end, category EMIT AFTER WATERMARK;\n"
)


def _record(name: str, fields: list[tuple[str, Any]]) -> str:
    return json.dumps(
        {"type": "record", "name": name, "fields": [{"name": n, "type": t} for n, t in fields]}
    )


def _auction_bid_record(outer: bool) -> str:
    """The Avro schema of (d)'s and (e)'s rows; the bid's columns are nullable in (e)'s (an
    auction without a bid)."""
    bid = ["null", "long"] if outer else "long"
    return _record(
        "auction_bid",
        [
            ("date_time", bid),
            ("auction", bid),
            ("bidder", bid),
            ("price", bid),
            ("seller", "long"),
            ("category", "long"),
            ("auction_time", "long"),
        ],
    )


def _peer_a(df: Any) -> Any:
    from pyspark.sql import functions as F

    return df.filter("n > 500").select(F.expr("unix_millis(ts)").alias("ts"), "usr", "n")


def _peer_s(df: Any) -> Any:
    from pyspark.sql import functions as F

    return df.filter("n > 500").select(
        F.expr("unix_millis(ts)").alias("ts"), "usr", F.expr("n * 2 + 1").alias("m")
    )


def _peer_b(df: Any) -> Any:
    from pyspark.sql import functions as F

    return (
        df.withWatermark("ts", "10 seconds")
        .groupBy(F.window("ts", "1 minute"), "usr")
        .agg(F.count("*").alias("c"), F.sum("n").alias("s"), F.max("n").alias("m"))
        .select(
            F.expr("unix_millis(window.start)").alias("window_start"),
            F.expr("unix_millis(window.end)").alias("window_end"),
            "usr",
            "c",
            "s",
            "m",
        )
    )


def _peer_c(df: Any) -> Any:
    from pyspark.sql import functions as F

    return (
        df.withWatermark("bidtime", "4 minutes")
        .groupBy(F.window("bidtime", "10 minutes"))
        .agg(
            F.max_by(F.struct("bidtime", "item"), "price").alias("top"),
            F.max("price").alias("price"),
        )
        .select(
            F.expr("unix_millis(window.start)").alias("wstart"),
            F.expr("unix_millis(window.end)").alias("wend"),
            F.expr("unix_millis(top.bidtime)").alias("bidtime"),
            "price",
            F.col("top.item").alias("item"),
        )
    )


def _peer_d(auctions: Any, bids: Any) -> Any:
    return _peer_join(auctions, bids, "inner")


def _peer_e(auctions: Any, bids: Any) -> Any:
    return _peer_join(auctions, bids, "leftouter")


def _peer_f(auctions: Any, bids: Any) -> Any:
    """(d)'s join feeding a windowed count in one query: Spark (3.4+) propagates the
    watermark from the stream-stream join to the aggregation after it."""
    from pyspark.sql import functions as F

    return (
        _joined(auctions, bids, "inner")
        .select(F.col("b.date_time").alias("date_time"), F.col("b.price").alias("price"),
                F.col("a.category").alias("category"))
        .groupBy(F.window("date_time", "1 minute"), "category")
        .agg(F.count("*").alias("bids"), F.max("price").alias("top"))
        .select(
            F.expr("unix_millis(window.start)").alias("window_start"),
            F.expr("unix_millis(window.end)").alias("window_end"),
            "category",
            "bids",
            "top",
        )
    )


def _joined(auctions: Any, bids: Any, how: str) -> Any:
    """Spark's stream-stream join of the auctions (``a``) and bids (``b``) of (d)-(f)."""
    from pyspark.sql import functions as F

    a = auctions.withWatermark("date_time", "10 seconds").alias("a")
    b = bids.withWatermark("date_time", "10 seconds").alias("b")
    return a.join(
        b,
        F.expr(
            "a.id = b.auction AND b.date_time BETWEEN a.date_time "
            "AND a.date_time + INTERVAL 10 MINUTES"
        ),
        how,
    )


def _peer_join(auctions: Any, bids: Any, how: str) -> Any:
    """Spark's stream-stream join of (d) and (e): an auction without a bid comes out of a
    ``leftouter`` join once the query's watermark passes its bound."""
    from pyspark.sql import functions as F

    return _joined(auctions, bids, how).select(
        F.expr("unix_millis(b.date_time)").alias("date_time"),
        F.col("b.auction").alias("auction"),
        F.col("b.bidder").alias("bidder"),
        F.col("b.price").alias("price"),
        F.col("a.seller").alias("seller"),
        F.col("a.category").alias("category"),
        F.expr("unix_millis(a.date_time)").alias("auction_time"),
    )


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    program: str  # format fields: the inputs' (topic) and out
    lateness_ms: int
    peer: Callable[..., Any]
    peer_out_schema: str  # Avro schema of the peer's output value (to_avro)
    time_field: str  # output field whose value (+ lateness when windowed) marks output due time
    windowed: bool
    keys: int = 10_000
    # The program's format fields naming its input topics, in the order of its tables; the
    # peer takes one frame per input, in this order.
    inputs: tuple[str, ...] = ("topic",)


WORKLOADS: dict[str, Workload] = {
    "a": Workload(
        "a",
        "decode + late gate + filter view (stateless)",
        _CLICKS + "CREATE VIEW big WITH ('topic' = '{out}', 'format' = 'append') AS\n"
        "SELECT ts, usr, n FROM clicks WHERE n > 500;\n",
        10_000,
        _peer_a,
        _record("big", [("ts", "long"), ("usr", "string"), ("n", "int")]),
        "ts",
        False,
    ),
    "s": Workload(
        "s",
        "decode + late gate + a view Spark computes (the step_sink shape)",
        _CLICKS + "CREATE VIEW big WITH ('topic' = '{out}', 'format' = 'append') AS\n"
        "SELECT ts, usr, n * 2 + 1 AS m FROM clicks WHERE n > 500;\n",
        10_000,
        _peer_s,
        _record("big", [("ts", "long"), ("usr", "string"), ("m", "int")]),
        "ts",
        False,
    ),
    "b": Workload(
        "b",
        "TUMBLE 1 min over 10k keys, COUNT/SUM/MAX, EMIT AFTER WATERMARK",
        _CLICKS + "CREATE VIEW per_user WITH ('topic' = '{out}', 'format' = 'append') AS\n"
        "SELECT window_start, window_end, usr, COUNT(*) AS c, SUM(n) AS s, MAX(n) AS m\n"
        "FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))\n"
        "GROUP BY window_start, window_end, usr\nEMIT AFTER WATERMARK;\n",
        10_000,
        _peer_b,
        _record(
            "per_user",
            [
                ("window_start", "long"),
                ("window_end", "long"),
                ("usr", "string"),
                ("c", "long"),
                ("s", "long"),
                ("m", "int"),
            ],
        ),
        "window_end",
        True,
    ),
    "c": Workload(
        "c",
        "NEXMark Q7: ARG_MAX per 10-minute window",
        _BIDS + "CREATE VIEW max_bid WITH ('topic' = '{out}', 'format' = 'append') AS\n"
        "SELECT window_start AS wstart, window_end AS wend, ARG_MAX(bidtime, price) AS bidtime,\n"
        "       MAX(price) AS price, ARG_MAX(item, price) AS item\n"
        "FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTE))\n"
        "GROUP BY window_start, window_end\nEMIT AFTER WATERMARK;\n",
        240_000,
        _peer_c,
        _record(
            "max_bid",
            [
                ("wstart", "long"),
                ("wend", "long"),
                ("bidtime", "long"),
                ("price", "long"),
                ("item", "string"),
            ],
        ),
        "wend",
        True,
    ),
    "d": Workload(
        "d",
        "auctions and bids: INNER interval join on the auction id, 10 minutes",
        _AUCTIONS_AND_BIDS + _AUCTION_BID.format(kind=""),
        10_000,
        _peer_d,
        _auction_bid_record(outer=False),
        "date_time",
        False,
        inputs=("auctions", "bids"),
    ),
    "e": Workload(
        "e",
        "auctions and bids: LEFT OUTER interval join (Tidemark's join operator, ADR 0017)",
        _AUCTIONS_AND_BIDS + _AUCTION_BID.format(kind="LEFT "),
        10_000,
        _peer_e,
        _auction_bid_record(outer=True),
        "date_time",
        False,
        inputs=("auctions", "bids"),
    ),
    "f": Workload(
        "f",
        "a per-minute count per category over (d)'s join: two queries through a stage "
        "boundary (ADR 0023)",
        _AUCTIONS_AND_BIDS + _AUCTION_BID_PER_MINUTE,
        10_000,
        _peer_f,
        _record(
            "per_category",
            [("window_start", "long"), ("window_end", "long"), ("category", "long"),
             ("bids", "long"), ("top", "long")],
        ),
        "window_end",
        True,
        inputs=("auctions", "bids"),
    ),
}

#: The workloads of one input topic (loadtests/idle_cpu.py runs a side over one).
ONE_INPUT = sorted(name for name, w in WORKLOADS.items() if len(w.inputs) == 1)
