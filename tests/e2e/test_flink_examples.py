# ruff: noqa: E501 - the pages' SQL is kept as they write it, long lines included
"""Examples of Flink SQL's documentation on Spark, as its pages write them (SPEC L1-L7, S9-S17;
docs/porting-from-flink.md): the Window Aggregation page's TUMBLE, HOP, CUMULATE and cascade
on ``window_time``; the Window Top-N page's Top-N after an aggregation and after a window
function; the Window Join page's FULL and INNER window joins; the Over Aggregation page's OVER
and WINDOW clause. Ten INSERT INTO statements of one program in Flink's dialect (tables with
``'connector' = 'kafka'``, ``WATERMARK FOR``), through the real broker; only the topics and
``'format' = 'avro'`` (the Avro page's format) and the test broker's address are this
test's. Every view writes one final
row per window, append-only, as Flink does.

Rows: the Window Aggregation page's bids, the Window Join page's left and right rows, and four
orders (over.md shows none). A step of rows, then a bound far ahead of every table, repeated
once so that the views read through a stage boundary (the cascade, the Top-N over an
aggregate) close their windows too. Hand-written expectations (the pages' results), and the
reference evaluator record for record.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from table_steps import oracle_values, run_steps, values_written

from app.circuit.reference import evaluate
from app.program.compile import compile_program
from app.runtime.planner.compose import compose

PROGRAM = """SET 'pipeline.name' = 'flink-examples';

CREATE TABLE Bid (
  bidtime TIMESTAMP(3),
  price DECIMAL(10, 2),
  item STRING,
  supplier_id STRING,
  WATERMARK FOR bidtime AS bidtime - INTERVAL '1' SECOND
) WITH ('connector' = 'kafka', 'topic' = '{bid}', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'avro');

CREATE TABLE tumble_result (window_start TIMESTAMP(3), window_end TIMESTAMP(3), price DECIMAL(10, 2))
WITH ('connector' = 'kafka', 'topic' = '{tumble_result}', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'avro');
CREATE TABLE hop_result (window_start TIMESTAMP(3), window_end TIMESTAMP(3), price DECIMAL(10, 2))
WITH ('connector' = 'kafka', 'topic' = '{hop_result}', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'avro');
CREATE TABLE cumulate_result (window_start TIMESTAMP(3), window_end TIMESTAMP(3), price DECIMAL(10, 2))
WITH ('connector' = 'kafka', 'topic' = '{cumulate_result}', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'avro');
CREATE TABLE cascade_result (window_start TIMESTAMP(3), window_end TIMESTAMP(3), total_price DECIMAL(10, 2))
WITH ('connector' = 'kafka', 'topic' = '{cascade_result}', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'avro');
CREATE TABLE topn_result (window_start TIMESTAMP(3), window_end TIMESTAMP(3), supplier_id STRING, price DECIMAL(10, 2), cnt BIGINT, rownum BIGINT)
WITH ('connector' = 'kafka', 'topic' = '{topn_result}', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'avro');

INSERT INTO tumble_result
SELECT window_start, window_end, SUM(price)
  FROM TABLE(
    TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
  GROUP BY window_start, window_end;

INSERT INTO hop_result
SELECT window_start, window_end, SUM(price)
  FROM TABLE(
    HOP(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES, INTERVAL '10' MINUTES))
  GROUP BY window_start, window_end;

INSERT INTO cumulate_result
SELECT window_start, window_end, SUM(price)
  FROM TABLE(
    CUMULATE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '2' MINUTES, INTERVAL '10' MINUTES))
  GROUP BY window_start, window_end;

-- tumbling 5 minutes for each supplier_id
CREATE VIEW window1 AS
SELECT window_start, window_end, window_time as rowtime, SUM(price) as partial_price
  FROM TABLE(
    TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES))
  GROUP BY supplier_id, window_start, window_end, window_time;

-- tumbling 10 minutes on the first window
INSERT INTO cascade_result
SELECT window_start, window_end, SUM(partial_price) as total_price
  FROM TABLE(
      TUMBLE(TABLE window1, DESCRIPTOR(rowtime), INTERVAL '10' MINUTES))
  GROUP BY window_start, window_end;

INSERT INTO topn_result
SELECT *
  FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY price DESC) as rownum
    FROM (
      SELECT window_start, window_end, supplier_id, SUM(price) as price, COUNT(*) as cnt
      FROM TABLE(
        TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
      GROUP BY window_start, window_end, supplier_id
    )
  ) WHERE rownum <= 3;

CREATE TABLE topn_tvf_result (bidtime TIMESTAMP(3), price DECIMAL(10, 2), item STRING, supplier_id STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3), window_time TIMESTAMP(3), rownum BIGINT)
WITH ('connector' = 'kafka', 'topic' = '{topn_tvf_result}', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'avro');

INSERT INTO topn_tvf_result
SELECT *
  FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY price DESC) as rownum
    FROM TABLE(
               TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
  ) WHERE rownum <= 3;

CREATE TABLE LeftTable (
  row_time TIMESTAMP(3), num INT, id STRING,
  WATERMARK FOR row_time AS row_time - INTERVAL '1' SECOND
) WITH ('connector' = 'kafka', 'topic' = '{lefttable}', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'avro');
CREATE TABLE RightTable (
  row_time TIMESTAMP(3), num INT, id STRING,
  WATERMARK FOR row_time AS row_time - INTERVAL '1' SECOND
) WITH ('connector' = 'kafka', 'topic' = '{righttable}', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'avro');
CREATE TABLE join_result (L_Num INT, L_Id STRING, R_Num INT, R_Id STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3))
WITH ('connector' = 'kafka', 'topic' = '{join_result}', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'avro');

INSERT INTO join_result
SELECT L.num as L_Num, L.id as L_Id, R.num as R_Num, R.id as R_Id, L.window_start, L.window_end
           FROM (
               SELECT * FROM TABLE(TUMBLE(TABLE LeftTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))
           ) L
           FULL JOIN (
               SELECT * FROM TABLE(TUMBLE(TABLE RightTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))
           ) R
           ON L.num = R.num AND L.window_start = R.window_start AND L.window_end = R.window_end;

CREATE TABLE inner_join_result (L_Num INT, L_Id STRING, R_Num INT, R_Id STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3))
WITH ('connector' = 'kafka', 'topic' = '{inner_join_result}', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'avro');

INSERT INTO inner_join_result
SELECT L.num as L_Num, L.id as L_Id, R.num as R_Num, R.id as R_Id, L.window_start, L.window_end
           FROM (
               SELECT * FROM TABLE(TUMBLE(TABLE LeftTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))
           ) L
           JOIN (
               SELECT * FROM TABLE(TUMBLE(TABLE RightTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))
           ) R
           ON L.num = R.num AND L.window_start = R.window_start AND L.window_end = R.window_end;

CREATE TABLE Orders (
  order_id STRING, product STRING, amount INT, order_time TIMESTAMP(3),
  WATERMARK FOR order_time AS order_time
) WITH ('connector' = 'kafka', 'topic' = '{orders}', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'avro');
CREATE TABLE over_result (order_id STRING, order_time TIMESTAMP(3), amount INT, one_hour_prod_amount_sum BIGINT)
WITH ('connector' = 'kafka', 'topic' = '{over_result}', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'avro');
CREATE TABLE over_clause_result (order_id STRING, order_time TIMESTAMP(3), amount INT, sum_amount BIGINT, avg_amount DOUBLE)
WITH ('connector' = 'kafka', 'topic' = '{over_clause_result}', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'avro');

INSERT INTO over_result
SELECT order_id, order_time, amount,
  SUM(amount) OVER (
    PARTITION BY product
    ORDER BY order_time
    RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW
  ) AS one_hour_prod_amount_sum
FROM Orders;

INSERT INTO over_clause_result
SELECT order_id, order_time, amount,
  SUM(amount) OVER w AS sum_amount,
  AVG(amount) OVER w AS avg_amount
FROM Orders
WINDOW w AS (
  PARTITION BY product
  ORDER BY order_time
  RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW);
"""

VIEWS = ("tumble_result", "hop_result", "cumulate_result", "cascade_result", "topn_result",
         "topn_tvf_result", "join_result", "inner_join_result", "over_result",
         "over_clause_result")


def at(clock: str) -> int:
    moment = dt.datetime.fromisoformat(f"2020-04-15T{clock}").replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


def hm(ms: int | None) -> str | None:
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%H:%M")


BIDS = [("08:05", "4.00", "C", "supplier1"), ("08:07", "2.00", "A", "supplier1"),
        ("08:09", "5.00", "D", "supplier2"), ("08:11", "3.00", "B", "supplier2"),
        ("08:13", "1.00", "E", "supplier1"), ("08:17", "6.00", "F", "supplier2")]
LEFT = [("12:02", 1, "L1"), ("12:06", 2, "L2"), ("12:03", 3, "L3")]
RIGHT = [("12:01", 2, "R2"), ("12:04", 3, "R3"), ("12:05", 4, "R4")]
ORDERS = [("o1", "A", 10, "10:00"), ("o2", "A", 20, "10:30"), ("o3", "B", 5, "10:40"),
          ("o4", "A", 1, "11:20")]
BOUND = at("23:00")

STEPS: list[dict[str, list[Any]]] = [
    {
        "bid": [{"bidtime": at(t), "price": Decimal(p), "item": i, "supplier_id": s}
                for t, p, i, s in BIDS],
        "lefttable": [{"row_time": at(t), "num": n, "id": i} for t, n, i in LEFT],
        "righttable": [{"row_time": at(t), "num": n, "id": i} for t, n, i in RIGHT],
        "orders": [{"order_id": o, "product": p, "amount": a, "order_time": at(t)}
                   for o, p, a, t in ORDERS],
    },
    {t: [("bound", BOUND)] for t in ("bid", "lefttable", "righttable", "orders")},
    {t: [("bound", BOUND)] for t in ("bid", "lefttable", "righttable", "orders")},
]


def rows(written: Any, *columns: str) -> list[tuple[Any, ...]]:
    """The values of ``columns`` of each row written, sorted; times as HH:MM, decimals as
    text."""
    out = []
    for value, count in written.items():
        row = dict(value)
        picked = tuple(hm(row[c]) if c in TIMES else str(row[c]) if isinstance(row[c], Decimal)
                       else row[c] for c in columns)
        out.extend([picked] * count)
    return sorted(out, key=repr)


TIMES = {"window_start", "window_end", "bidtime", "order_time"}


@pytest.mark.e2e
@pytest.mark.slow  # three stages per step, ~2-4 min: `-m slow tests/e2e/test_flink_examples.py`
def test_flink_documentation_examples_run_on_spark_as_written_l1_s12_s16(
    kafka: Any, unique_topic: Any, tmp_path: Path, spark: Any
) -> None:
    names = ["bid", "lefttable", "righttable", "orders", *VIEWS]
    topics = {n: unique_topic(n) for n in names}
    for table in ("bid", "lefttable", "righttable", "orders"):
        kafka.create_topic(topics[table], partitions=2)
    path = tmp_path / "flink_examples.sql"
    path.write_text(PROGRAM.format(bootstrap=kafka.conf()["bootstrap.servers"], **topics),
                    encoding="utf-8")
    circuit = compile_program(path)
    assert circuit.dialect == "flink"
    assert compose(circuit).refused == ()

    _, inputs = run_steps(kafka, tmp_path, circuit, topics, STEPS)
    expected = evaluate(circuit, inputs)
    got = {v: values_written(kafka, circuit, v, topics[v]) for v in VIEWS}
    for view in VIEWS:
        assert got[view] == oracle_values(expected, view), view

    # Window Aggregation: the page's results.
    assert rows(got["tumble_result"], "window_start", "window_end", "price") == [
        ("08:00", "08:10", "11.00"), ("08:10", "08:20", "10.00")]
    assert rows(got["hop_result"], "window_start", "window_end", "price") == [
        ("08:00", "08:10", "11.00"), ("08:05", "08:15", "15.00"),
        ("08:10", "08:20", "10.00"), ("08:15", "08:25", "6.00")]
    assert rows(got["cumulate_result"], "window_start", "window_end", "price") == [
        ("08:00", "08:06", "4.00"), ("08:00", "08:08", "6.00"), ("08:00", "08:10", "11.00"),
        ("08:10", "08:12", "3.00"), ("08:10", "08:14", "4.00"), ("08:10", "08:16", "4.00"),
        ("08:10", "08:18", "10.00"), ("08:10", "08:20", "10.00")]
    assert rows(got["cascade_result"], "window_start", "window_end", "total_price") == [
        ("08:00", "08:10", "11.00"), ("08:10", "08:20", "10.00")]
    # Window Top-N: per window, the suppliers by their sum; the three best bids.
    assert rows(got["topn_result"], "window_start", "supplier_id", "price", "cnt",
                "rownum") == [
        ("08:00", "supplier1", "6.00", 2, 1), ("08:00", "supplier2", "5.00", 1, 2),
        ("08:10", "supplier1", "1.00", 1, 2), ("08:10", "supplier2", "9.00", 2, 1)]
    assert rows(got["topn_tvf_result"], "window_start", "item", "price", "rownum") == [
        ("08:00", "A", "2.00", 3), ("08:00", "C", "4.00", 2), ("08:00", "D", "5.00", 1),
        ("08:10", "B", "3.00", 2), ("08:10", "E", "1.00", 3), ("08:10", "F", "6.00", 1)]
    # Window Join: the page's FULL JOIN rows (L.window_start is NULL on a right-only row),
    # and the one pair of the INNER form.
    assert rows(got["join_result"], "l_num", "l_id", "r_num", "r_id", "window_start") == sorted([
        (1, "L1", None, None, "12:00"), (None, None, 2, "R2", None),
        (3, "L3", 3, "R3", "12:00"), (2, "L2", None, None, "12:05"),
        (None, None, 4, "R4", None)], key=repr)
    assert rows(got["inner_join_result"], "l_num", "l_id", "r_num", "r_id",
                "window_start") == [(3, "L3", 3, "R3", "12:00")]
    # Over Aggregation: each order with its product's amounts of the hour before it.
    assert rows(got["over_result"], "order_id", "one_hour_prod_amount_sum") == [
        ("o1", 10), ("o2", 30), ("o3", 5), ("o4", 21)]
    assert rows(got["over_clause_result"], "order_id", "sum_amount", "avg_amount") == [
        ("o1", 10, 10.0), ("o2", 30, 15.0), ("o3", 5, 5.0), ("o4", 21, 10.5)]
