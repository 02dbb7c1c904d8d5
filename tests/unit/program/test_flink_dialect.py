"""SPEC L1-L7 for Flink SQL programs: the examples of Flink's documentation, as its pages write
them, compile (or are refused by name, docs/porting-from-flink.md says why).

Pages: CREATE TABLE (of CREATE Statements), Window Aggregation, Window Top-N, Window Join,
Joins, Over Aggregation, INSERT, the Kafka and Upsert Kafka connectors, the Avro, Avro
Confluent, JSON and Debezium formats. A table whose options a page elides (``WITH (...)``) gets
a minimal Kafka table's, as does a table a page reads but leaves out. A page
that shows a table with ``desc`` (``bidtime TIMESTAMP(3) *ROWTIME*`` with the watermark
```bidtime` - INTERVAL '1' SECOND``) gets that table as Flink DDL; a query the page runs in
the SQL client (``Flink SQL> SELECT ...``) is written to a table by ``INSERT INTO``, as a job
writes it. A few are run through the reference evaluator with the page's own rows and
compared with the page's results.
"""

# ruff: noqa: E501 - the pages' SQL is kept as they write it, long lines included

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from typing import Any

import pytest

from app.circuit.explain import explain_text
from app.circuit.ir import Circuit
from app.circuit.reference import Punctuation, StepInput, evaluate
from app.errors import ProgramError
from app.program.compile import compile_program

KAFKA = ("'connector' = 'kafka', 'topic' = '{topic}', "
         "'properties.bootstrap.servers' = 'localhost:9092', 'format' = 'json'")


def table(name: str, columns: str) -> str:
    return f"CREATE TABLE {name} (\n{columns}\n) WITH ({KAFKA.format(topic=name.lower())});\n"


#: A table INSERT INTO writes is declared as any other.
sink = table


BID = table("Bid", """  bidtime TIMESTAMP(3),
  price DECIMAL(10, 2),
  item STRING,
  supplier_id STRING,
  WATERMARK FOR bidtime AS bidtime - INTERVAL '1' SECOND""")


def compiled(text: str) -> Circuit:
    return compile_program("flink.sql", text)


def refused(text: str) -> tuple[int, int, str, str]:
    """(line, column, message, fix) of the first error of ``text``."""
    with pytest.raises(ProgramError) as info:
        compile_program("flink.sql", text)
    first = info.value.diagnostics[0]
    return first.position.line, first.position.column, first.message, first.fix or ""


def at(clock: str) -> int:
    moment = dt.datetime.fromisoformat(f"2020-04-15T{clock}").replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


BID_ROWS = [("08:05", "4.00", "C", "supplier1"), ("08:07", "2.00", "A", "supplier1"),
            ("08:09", "5.00", "D", "supplier2"), ("08:11", "3.00", "B", "supplier2"),
            ("08:13", "1.00", "E", "supplier1"), ("08:17", "6.00", "F", "supplier2")]


def bids(rows: list[tuple[str, str, str, str]]) -> list[StepInput]:
    """The page's rows in one step, then a punctuation that completes every window."""
    return [StepInput({"bid": [{"bidtime": at(t), "price": Decimal(p), "item": i,
                                "supplier_id": s} for t, p, i, s in rows]}),
            StepInput({}, punctuations={"bid": [Punctuation(at("09:00"))]})]


def outputs(circuit: Circuit, steps: list[StepInput], view: str) -> list[dict[str, Any]]:
    return [dict(r.value) for result in evaluate(circuit, steps) for r in result.outputs[view]]


def clock(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%H:%M")


# -- Window Aggregation (window-agg.md) ---------------------------------------------------------

WINDOWED = sink("result", "  window_start TIMESTAMP(3), window_end TIMESTAMP(3), "
                "price DECIMAL(10, 2)")

TUMBLE = """INSERT INTO result
SELECT window_start, window_end, SUM(price)
  FROM TABLE(
    TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
  GROUP BY window_start, window_end;"""

HOP = """INSERT INTO result
SELECT window_start, window_end, SUM(price)
  FROM TABLE(
    HOP(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES, INTERVAL '10' MINUTES))
  GROUP BY window_start, window_end;"""

CUMULATE = """INSERT INTO result
SELECT window_start, window_end, SUM(price)
  FROM TABLE(
    CUMULATE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '2' MINUTES, INTERVAL '10' MINUTES))
  GROUP BY window_start, window_end;"""


@pytest.mark.parametrize("query, expected", [
    (TUMBLE, [("08:00", "08:10", "11.00"), ("08:10", "08:20", "10.00")]),
    (HOP, [("08:00", "08:10", "11.00"), ("08:05", "08:15", "15.00"),
           ("08:10", "08:20", "10.00"), ("08:15", "08:25", "6.00")]),
    (CUMULATE, [("08:00", "08:06", "4.00"), ("08:00", "08:08", "6.00"),
                ("08:00", "08:10", "11.00"), ("08:10", "08:12", "3.00"),
                ("08:10", "08:14", "4.00"), ("08:10", "08:16", "4.00"),
                ("08:10", "08:18", "10.00"), ("08:10", "08:20", "10.00")]),
], ids=["tumble", "hop", "cumulate"])
def test_s12_window_aggregation_writes_the_pages_final_rows(
        query: str, expected: list[tuple[str, str, str]]) -> None:
    circuit = compiled(BID + WINDOWED + query)
    view = circuit.view("result")
    assert circuit.dialect == "flink"
    assert view.emit.after_watermark and view.output is not None
    assert view.output.format == "append"
    rows = sorted((clock(r["window_start"]), clock(r["window_end"]), str(r["price"]))
                  for r in outputs(circuit, bids(BID_ROWS), "result"))
    assert rows == sorted(expected)


@pytest.mark.parametrize("group_by", [
    "GROUP BY window_start, window_end, GROUPING SETS ((supplier_id), ());",
    "GROUP BY window_start, window_end, ROLLUP (supplier_id);",
    "GROUP BY window_start, window_end, CUBE (supplier_id, item);",
], ids=["grouping-sets", "rollup", "cube"])
def test_l7_grouping_sets_rollup_and_cube_are_refused_by_name(group_by: str) -> None:
    text = (BID + sink("result", "  window_start TIMESTAMP(3), window_end TIMESTAMP(3), "
                       "item STRING, supplier_id STRING, price DECIMAL(10, 2)")
            + "INSERT INTO result\nSELECT window_start, window_end, item, supplier_id, "
            "SUM(price) as price\n  FROM TABLE(\n    TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), "
            f"INTERVAL '10' MINUTES))\n  {group_by}")
    line, _, message, _ = refused(text)
    assert message == f"unsupported SQL: {group_by[len('GROUP BY window_start, window_end, '):-1]}"
    assert line == text.count("\n") + 1


def test_s10_window_time_cascades_one_window_aggregation_into_the_next() -> None:
    """The page's cascade: window_time (window_end - 1 ms) is the first aggregation's time
    attribute, which the second windows on."""
    circuit = compiled(BID + sink("result", "  window_start TIMESTAMP(3), "
                                  "window_end TIMESTAMP(3), total_price DECIMAL(10, 2)") + """
-- tumbling 5 minutes for each supplier_id
CREATE VIEW window1 AS
SELECT window_start, window_end, window_time as rowtime, SUM(price) as partial_price
  FROM TABLE(
    TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES))
  GROUP BY supplier_id, window_start, window_end, window_time;

-- tumbling 10 minutes on the first window
INSERT INTO result
SELECT window_start, window_end, SUM(partial_price) as total_price
  FROM TABLE(
      TUMBLE(TABLE window1, DESCRIPTOR(rowtime), INTERVAL '10' MINUTES))
  GROUP BY window_start, window_end;""")
    window1 = circuit.view("window1")
    assert window1.emit.after_watermark
    (rowtime,) = [a for a in window1.time_attributes if a.column == "rowtime"]
    assert rowtime.kind == "derived"
    rows = sorted((clock(r["window_start"]), str(r["total_price"]))
                  for r in outputs(circuit, bids(BID_ROWS), "result"))
    assert rows == [("08:00", "11.00"), ("08:10", "10.00")]


# -- Window Top-N (window-topn.md) --------------------------------------------------------------

def test_s12_window_top_n_after_a_window_aggregation_keeps_the_pages_top_three() -> None:
    circuit = compiled(BID + sink("result", "  window_start TIMESTAMP(3), window_end "
                                  "TIMESTAMP(3), supplier_id STRING, price DECIMAL(10, 2), "
                                  "cnt BIGINT, rownum BIGINT") + """INSERT INTO result
SELECT *
  FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY price DESC) as rownum
    FROM (
      SELECT window_start, window_end, supplier_id, SUM(price) as price, COUNT(*) as cnt
      FROM TABLE(
        TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
      GROUP BY window_start, window_end, supplier_id
    )
  ) WHERE rownum <= 3;""")
    rows = [("08:05", "4.00", "A", "supplier1"), ("08:06", "4.00", "C", "supplier2"),
            ("08:07", "2.00", "G", "supplier1"), ("08:08", "2.00", "B", "supplier3"),
            ("08:09", "5.00", "D", "supplier4"), ("08:11", "2.00", "B", "supplier3"),
            ("08:13", "1.00", "E", "supplier1"), ("08:15", "3.00", "H", "supplier2"),
            ("08:17", "6.00", "F", "supplier5")]
    got = sorted((clock(r["window_start"]), r["supplier_id"], str(r["price"]), r["cnt"],
                  r["rownum"]) for r in outputs(circuit, bids(rows), "result"))
    assert got == sorted([
        ("08:00", "supplier1", "6.00", 2, 1), ("08:00", "supplier4", "5.00", 1, 2),
        ("08:00", "supplier2", "4.00", 1, 3), ("08:10", "supplier5", "6.00", 1, 1),
        ("08:10", "supplier2", "3.00", 1, 2), ("08:10", "supplier3", "2.00", 1, 3)])


def test_l3_window_top_n_after_a_window_function_compiles() -> None:
    circuit = compiled(BID + sink("result", "  bidtime TIMESTAMP(3), price DECIMAL(10, 2), "
                                  "item STRING, supplier_id STRING, window_start TIMESTAMP(3), "
                                  "window_end TIMESTAMP(3), window_time TIMESTAMP(3), "
                                  "rownum BIGINT") + """INSERT INTO result
SELECT *
  FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY price DESC) as rownum
    FROM TABLE(
               TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
  ) WHERE rownum <= 3;""")
    assert circuit.view("result").top_n is not None


# -- Window Join (window-join.md) ---------------------------------------------------------------

SIDES = (table("LeftTable", "  row_time TIMESTAMP(3), num INT, id STRING,\n"
               "  WATERMARK FOR row_time AS row_time - INTERVAL '1' SECOND")
         + table("RightTable", "  row_time TIMESTAMP(3), num INT, id STRING,\n"
                 "  WATERMARK FOR row_time AS row_time - INTERVAL '1' SECOND"))


def test_s16_window_full_join_writes_the_pages_rows() -> None:
    circuit = compiled(SIDES + sink("result", "  L_Num INT, L_Id STRING, R_Num INT, "
                                    "R_Id STRING, window_start TIMESTAMP(3), "
                                    "window_end TIMESTAMP(3)") + """INSERT INTO result
SELECT L.num as L_Num, L.id as L_Id, R.num as R_Num, R.id as R_Id, L.window_start, L.window_end
           FROM (
               SELECT * FROM TABLE(TUMBLE(TABLE LeftTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))
           ) L
           FULL JOIN (
               SELECT * FROM TABLE(TUMBLE(TABLE RightTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))
           ) R
           ON L.num = R.num AND L.window_start = R.window_start AND L.window_end = R.window_end;""")
    assert circuit.view("result").join is not None
    steps = [StepInput({"lefttable": [{"row_time": at("12:02"), "num": 1, "id": "L1"},
                                      {"row_time": at("12:06"), "num": 2, "id": "L2"},
                                      {"row_time": at("12:03"), "num": 3, "id": "L3"}],
                        "righttable": [{"row_time": at("12:01"), "num": 2, "id": "R2"},
                                       {"row_time": at("12:04"), "num": 3, "id": "R3"},
                                       {"row_time": at("12:05"), "num": 4, "id": "R4"}]}),
             StepInput({}, punctuations={"lefttable": [Punctuation(at("13:00"))],
                                         "righttable": [Punctuation(at("13:00"))]})]
    got = sorted((r["l_num"] or 0, r["l_id"] or "", r["r_num"] or 0, r["r_id"] or "")
                 for r in outputs(circuit, steps, "result"))
    # The page's L.window_start of an unmatched right row is NULL; so is its L_Num.
    assert got == sorted([(1, "L1", 0, ""), (0, "", 2, "R2"), (3, "L3", 3, "R3"),
                          (2, "L2", 0, ""), (0, "", 4, "R4")])


@pytest.mark.parametrize("where", [
    """L.num IN (
             SELECT num FROM (
               SELECT * FROM TABLE(TUMBLE(TABLE RightTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))
             ) R WHERE L.window_start = R.window_start AND L.window_end = R.window_end)""",
    """EXISTS (
             SELECT * FROM (
               SELECT * FROM TABLE(TUMBLE(TABLE RightTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))
             ) R WHERE L.num = R.num AND L.window_start = R.window_start AND L.window_end = R.window_end)""",
    """L.num NOT IN (
             SELECT num FROM (
               SELECT * FROM TABLE(TUMBLE(TABLE RightTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))
             ) R WHERE L.window_start = R.window_start AND L.window_end = R.window_end)""",
    """NOT EXISTS (
             SELECT * FROM (
               SELECT * FROM TABLE(TUMBLE(TABLE RightTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))
             ) R WHERE L.num = R.num AND L.window_start = R.window_start AND L.window_end = R.window_end)""",
], ids=["semi-in", "semi-exists", "anti-not-in", "anti-not-exists"])
def test_l7_semi_and_anti_window_joins_are_refused_as_subqueries_in_where(where: str) -> None:
    text = (SIDES + sink("result", "  row_time TIMESTAMP(3), num INT, id STRING, "
                         "window_start TIMESTAMP(3), window_end TIMESTAMP(3), "
                         "window_time TIMESTAMP(3)") + """INSERT INTO result
SELECT *
           FROM (
               SELECT * FROM TABLE(TUMBLE(TABLE LeftTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))
           ) L WHERE """ + where + ";")
    _, _, message, fix = refused(text)
    assert message.startswith("unsupported: a subquery in ")
    assert "write it as a JOIN" in fix


# -- Joins (joins.md) ---------------------------------------------------------------------------

ORDERS = table("Orders", "  order_id STRING, product STRING, amount INT, "
               "order_time TIMESTAMP(3),\n  WATERMARK FOR order_time AS order_time")


def test_s16_the_interval_join_of_orders_and_shipments_compiles() -> None:
    circuit = compiled(
        table("Orders", "  id STRING, order_time TIMESTAMP(3),\n"
              "  WATERMARK FOR order_time AS order_time")
        + table("Shipments", "  order_id STRING, ship_time TIMESTAMP(3),\n"
                "  WATERMARK FOR ship_time AS ship_time")
        + sink("result", "  id STRING, order_time TIMESTAMP(3), order_id STRING, "
               "ship_time TIMESTAMP(3)") + """INSERT INTO result
SELECT *
FROM Orders o, Shipments s
WHERE o.id = s.order_id
AND o.order_time BETWEEN s.ship_time - INTERVAL '4' HOUR AND s.ship_time;""")
    join = circuit.view("result").join
    assert join is not None and join.form == "interval"


def test_s16_the_regular_inner_join_compiles_with_the_unbounded_state_warning() -> None:
    circuit = compiled(
        table("Orders", "  order_id STRING, productId STRING, amount INT")
        + table("Product", "  id STRING, name STRING")
        + sink("result", "  order_id STRING, productId STRING, amount INT, id STRING, "
               "name STRING") + """INSERT INTO result
SELECT * FROM Orders
INNER JOIN Product
ON Orders.productId = Product.id;""")
    assert any("keeps unbounded state" in w.message for w in circuit.warnings)


def test_s16_s18_a_regular_outer_join_updates_its_rows_so_kafka_refuses_it() -> None:
    """A row without a match is written padded at once and retracted when its match comes
    (S16, S18): an updating query, which a 'kafka' table cannot take, as in Flink."""
    _, _, message, _ = refused(
        table("Orders", "  order_id STRING, product_id STRING")
        + table("Product", "  id STRING, name STRING")
        + sink("result", "  order_id STRING, product_id STRING, id STRING, name STRING")
        + "INSERT INTO result\nSELECT *\nFROM Orders\nLEFT JOIN Product\n"
        "ON Orders.product_id = Product.id;")
    assert "the query updates its rows" in message
    assert "an OUTER JOIN without a time bound" in message


def test_s16_the_event_time_temporal_join_of_the_page_over_debezium_compiles() -> None:
    """The page's versioned table reads a Debezium changelog, timed by each change's
    ``source.ts_ms``: its delete events delete keys (ADR 0028)."""
    circuit = compiled("""CREATE TABLE orders (
    order_id    STRING,
    price       DECIMAL(32,2),
    currency    STRING,
    order_time  TIMESTAMP(3),
    WATERMARK FOR order_time AS order_time
) WITH ('connector' = 'kafka', 'topic' = 'orders', 'format' = 'json');
CREATE TABLE currency_rates (
    currency STRING,
    conversion_rate DECIMAL(32, 2),
    update_time TIMESTAMP(3) METADATA FROM 'value.source.timestamp' VIRTUAL,
    WATERMARK FOR update_time AS update_time,
    PRIMARY KEY(currency) NOT ENFORCED
) WITH (
   'connector' = 'kafka',
   'topic' = 'rates',
   'value.format' = 'debezium-json'
);
CREATE TABLE result (order_id STRING, price DECIMAL(32, 2), currency STRING,
    conversion_rate DECIMAL(32, 2), order_time TIMESTAMP(3))
WITH ('connector' = 'kafka', 'topic' = 'result', 'format' = 'json');
INSERT INTO result
SELECT order_id, price, orders.currency, conversion_rate, order_time
FROM orders
LEFT JOIN currency_rates FOR SYSTEM_TIME AS OF orders.order_time
ON orders.currency = currency_rates.currency;""")
    rates = circuit.table("currency_rates")
    assert rates.format == "debezium-json" and rates.deletes_keys
    assert rates.column("update_time").metadata == "value.source.timestamp"
    assert [lt.column for lt in rates.lateness] == ["update_time"]
    join = circuit.view("result").join
    assert join is not None and join.form == "temporal"


def test_s16_the_temporal_join_of_the_page_over_a_kafka_keyed_table_compiles() -> None:
    circuit = compiled("""CREATE TABLE orders (
    order_id    STRING,
    price       DECIMAL(32,2),
    currency    STRING,
    order_time  TIMESTAMP(3),
    WATERMARK FOR order_time AS order_time
) WITH ('connector' = 'kafka', 'topic' = 'orders', 'format' = 'json');
CREATE TABLE currency_rates (
    currency STRING METADATA FROM 'key',
    conversion_rate DECIMAL(32, 2),
    update_time TIMESTAMP(3) METADATA FROM 'timestamp' VIRTUAL,
    WATERMARK FOR update_time AS update_time,
    PRIMARY KEY(currency) NOT ENFORCED
) WITH ('connector' = 'kafka', 'topic' = 'rates', 'value.format' = 'json');
CREATE TABLE result (order_id STRING, price DECIMAL(32, 2), currency STRING,
    conversion_rate DECIMAL(32, 2), order_time TIMESTAMP(3))
WITH ('connector' = 'kafka', 'topic' = 'result', 'format' = 'json');
INSERT INTO result
SELECT
     order_id,
     price,
     orders.currency,
     conversion_rate,
     order_time
FROM orders
LEFT JOIN currency_rates FOR SYSTEM_TIME AS OF orders.order_time
ON orders.currency = currency_rates.currency;""")
    assert circuit.table("currency_rates").deletes_by_tombstone
    join = circuit.view("result").join
    assert join is not None and join.form == "temporal"


def test_l7_a_lookup_join_of_a_jdbc_table_is_refused_at_its_connector() -> None:
    line, column, message, _ = refused("""-- Customers is backed by the JDBC connector and can be used for lookup joins
CREATE TEMPORARY TABLE Customers (
  id INT,
  name STRING,
  country STRING,
  zip STRING
) WITH (
  'connector' = 'jdbc',
  'url' = 'jdbc:mysql://mysqlhost:3306/customerdb',
  'table-name' = 'customers'
);""")
    assert (line, column) == (8, 3)
    assert message == ("unsupported option 'connector' of table customers: Tidemark reads and "
                       "writes Kafka topics only, not 'jdbc'")


# -- Over Aggregation (over-agg.md) -------------------------------------------------------------

OVER_SINK = sink("result", "  order_id STRING, order_time TIMESTAMP(3), amount INT, "
                 "one_hour_prod_amount_sum BIGINT")


@pytest.mark.parametrize("query", ["""SELECT order_id, order_time, amount,
  SUM(amount) OVER (
    PARTITION BY product
    ORDER BY order_time
    RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW
  ) AS one_hour_prod_amount_sum
FROM Orders""", """SELECT order_id, order_time, amount,
  SUM(amount) OVER w AS sum_amount
FROM Orders
WINDOW w AS (
  PARTITION BY product
  ORDER BY order_time
  RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW)"""], ids=["over", "window-clause"])
def test_l3_over_aggregations_of_the_page_compile(query: str) -> None:
    circuit = compiled(ORDERS + OVER_SINK + "INSERT INTO result\n" + query + ";")
    view = circuit.view("result")
    assert view.over is not None and view.output is not None
    assert [c.name for c in view.columns][-1] == "one_hour_prod_amount_sum"


def test_l3_two_over_aggregates_sharing_a_window_clause_compile() -> None:
    circuit = compiled(ORDERS + sink("result", "  order_id STRING, order_time TIMESTAMP(3), "
                                     "amount INT, sum_amount BIGINT, avg_amount DOUBLE")
                       + """INSERT INTO result
SELECT order_id, order_time, amount,
  SUM(amount) OVER w AS sum_amount,
  AVG(amount) OVER w AS avg_amount
FROM Orders
WINDOW w AS (
  PARTITION BY product
  ORDER BY order_time
  RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW);""")
    assert circuit.view("result").over is not None


# -- INSERT (insert.md) -------------------------------------------------------------------------

ORDERS_INSERT = """CREATE TABLE Orders (`user` BIGINT, product STRING, amount INT) WITH ({o});
CREATE TABLE RubberOrders(product STRING, amount INT) WITH ({r});
CREATE TABLE GlassOrders(product VARCHAR, amount INT) WITH ({g});
""".format(o=KAFKA.format(topic="orders"), r=KAFKA.format(topic="rubber"),
           g=KAFKA.format(topic="glass"))


def test_l3_insert_statements_of_a_statement_set_write_their_tables() -> None:
    circuit = compiled(ORDERS_INSERT + """EXECUTE STATEMENT SET
BEGIN
INSERT INTO RubberOrders SELECT product, amount FROM Orders WHERE product LIKE '%Rubber%';
INSERT INTO GlassOrders SELECT product, amount FROM Orders WHERE product LIKE '%Glass%';
END;""")
    assert [(v.name, v.output.topic if v.output else None) for v in circuit.views] == [
        ("rubberorders", "rubber"), ("glassorders", "glass")]
    assert circuit.table("orders").columns[0].name == "user"


def test_s17_several_inserts_into_one_table_are_the_union_all_of_their_queries() -> None:
    circuit = compiled(ORDERS_INSERT + """
INSERT INTO RubberOrders SELECT product, amount FROM Orders WHERE product LIKE '%Rubber%';
INSERT INTO RubberOrders SELECT product, amount * 2 FROM Orders WHERE product = 'tyre';""")
    view = circuit.view("rubberorders")
    assert view.union is not None
    assert view.sources == ("rubberorders.insert1", "rubberorders.insert2")
    steps = [StepInput({"orders": [{"user": 1, "product": "Rubber duck", "amount": 3},
                                   {"user": 2, "product": "tyre", "amount": 5}]})]
    assert sorted(outputs(circuit, steps, "rubberorders"), key=lambda r: r["amount"]) == [
        {"product": "Rubber duck", "amount": 3}, {"product": "tyre", "amount": 10}]


@pytest.mark.parametrize("statement, message", [
    ("INSERT INTO RubberOrders\n  VALUES ('fred flintstone', 35);",
     "unsupported: INSERT INTO ... VALUES (a program's rows come from its tables' topics)"),
    ("INSERT OVERWRITE RubberOrders SELECT product, amount FROM Orders;",
     "unsupported: INSERT OVERWRITE (a Kafka topic is appended to, never overwritten)"),
    ("INSERT INTO RubberOrders SELECT product FROM Orders;",
     "INSERT INTO rubberorders writes 1 columns, but rubberorders has 2: product, amount"),
    ("INSERT INTO RubberOrders SELECT amount, product FROM Orders;",
     "column 1 of INSERT INTO rubberorders (amount) is INT, but rubberorders.product is "
     "VARCHAR"),
    ("INSERT INTO Orders SELECT `user`, product, amount FROM Orders;",
     "table orders is an input (it has no 'connector'), so INSERT INTO cannot write it"),
], ids=["values", "overwrite", "count", "types", "read-and-written"])
def test_l7_insert_forms_tidemark_refuses_are_named(statement: str, message: str) -> None:
    text = ORDERS_INSERT + statement
    if "INTO Orders" in statement:
        text = text.replace("'connector' = 'kafka', 'topic' = 'orders', ", "'topic' = 'orders', ")
    _, _, found, _ = refused(text)
    assert found == message


#: PARTITIONED BY and DISTRIBUTED BY: a record's partition is its key's (docs/porting-from-flink.md).
PARTITION_FIX = ("; key the records with 'key.fields' (or the PRIMARY KEY of an upsert-kafka "
                 "table)")
PLACED = ("a record's partition is the murmur2 hash of its key, as Java's Kafka client places "
          "it")
PARTITIONED = (f"PARTITIONED BY is not supported: Kafka topics are not partitioned by columns in "
               f"Tidemark; {PLACED}", "remove PARTITIONED BY" + PARTITION_FIX)


def test_l7_a_partitioned_table_is_refused_at_partitioned_by() -> None:
    line, column, message, fix = refused("""-- Creates a partitioned table
CREATE TABLE country_page_view (user STRING, cnt INT, date STRING, country STRING)
PARTITIONED BY (date, country)
WITH (...)""")
    assert (line, column, message, fix) == (3, 1, *PARTITIONED)


# -- CREATE TABLE (create.md, CREATE Statements) ------------------------------------------------
#
# The page elides its tables' options (``WITH (...)``, ``'connector' = 'kafka' ...``,
# ``WITH ( . . . )``); the examples below write them out as a minimal Kafka table's (the
# elision itself is a syntax error), keeping the page's lines where they are.

ELIDED = re.compile(r"(?:'connector' = 'kafka',?)?(\s*)(?<!')(?:\.\.\.|\. \. \.)(?!')")


def options_written_out(page: str, topic: str) -> str:
    return ELIDED.sub(lambda m: KAFKA.format(topic=topic) + m.group(1), page)


PHYSICAL = """CREATE TABLE MyTable (
  `user_id` BIGINT,
  `name` STRING
) WITH (
  ...
);"""

METADATA_FROM = """CREATE TABLE MyTable (
  `user_id` BIGINT,
  `name` STRING,
  `record_time` TIMESTAMP_LTZ(3) METADATA FROM 'timestamp'    -- reads and writes a Kafka record's timestamp
) WITH (
  'connector' = 'kafka'
  ...
);"""

METADATA_NAMED = """CREATE TABLE MyTable (
  `user_id` BIGINT,
  `name` STRING,
  `timestamp` TIMESTAMP_LTZ(3) METADATA    -- use column name as metadata key
) WITH (
  'connector' = 'kafka'
  ...
);"""

METADATA_CAST = """CREATE TABLE MyTable (
  `user_id` BIGINT,
  `name` STRING,
  `timestamp` BIGINT METADATA    -- cast the timestamp as BIGINT
) WITH (
  'connector' = 'kafka'
  ...
);"""

METADATA_VIRTUAL = """CREATE TABLE MyTable (
  `timestamp` BIGINT METADATA,       -- part of the query-to-sink schema
  `offset` BIGINT METADATA VIRTUAL,  -- not part of the query-to-sink schema
  `user_id` BIGINT,
  `name` STRING,
) WITH (
  'connector' = 'kafka'
  ...
);"""

COMPUTED = """CREATE TABLE MyTable (
  `user_id` BIGINT,
  `price` DOUBLE,
  `quantity` DOUBLE,
  `cost` AS price * quantity  -- evaluate expression and supply the result to queries
) WITH (
  'connector' = 'kafka'
  ...
);"""

WATERMARKED = """CREATE TABLE Orders (
    `user` BIGINT,
    product STRING,
    order_time TIMESTAMP(3),
    WATERMARK FOR order_time AS order_time - INTERVAL '5' SECOND
) WITH ( . . . );"""

LIKE_ORDERS = """CREATE TABLE Orders (
    `user` BIGINT,
    product STRING,
    order_time TIMESTAMP(3)
) WITH ( 
    'connector' = 'kafka',
    'scan.startup.mode' = 'earliest-offset'
);

CREATE TABLE Orders_with_watermark (
    -- Add watermark definition
    WATERMARK FOR order_time AS order_time - INTERVAL '5' SECOND 
) WITH (
    -- Overwrite the startup-mode
    'scan.startup.mode' = 'latest-offset'
)
LIKE Orders;"""

LIKE_ORDERS_EQUIVALENT = """CREATE TABLE Orders_with_watermark (
    `user` BIGINT,
    product STRING,
    order_time TIMESTAMP(3),
    WATERMARK FOR order_time AS order_time - INTERVAL '5' SECOND 
) WITH (
    'connector' = 'kafka',
    'scan.startup.mode' = 'latest-offset'
);"""

LIKE_OPTIONS = """-- A source table stored in a filesystem
CREATE TABLE Orders_in_file (
    `user` BIGINT,
    product STRING,
    order_time_string STRING,
    order_time AS to_timestamp(order_time_string)
    
)
PARTITIONED BY (`user`) 
WITH ( 
    'connector' = 'filesystem',
    'path' = '...'
);

-- A corresponding table we want to store in kafka
CREATE TABLE Orders_in_kafka (
    -- Add watermark definition
    WATERMARK FOR order_time AS order_time - INTERVAL '5' SECOND 
) WITH (
    'connector' = 'kafka',
    ...
)
LIKE Orders_in_file (
    -- Exclude everything besides the computed columns which we need to generate the watermark for.
    -- We do not want to have the partitions or filesystem options as those do not apply to kafka. 
    EXCLUDING ALL
    INCLUDING GENERATED
);"""

#: The table the CTAS and RTAS examples read, which the page leaves out.
SOURCE_TABLE = table("source_table", "  id BIGINT, name STRING, age INT")

CTAS = """CREATE TABLE my_ctas_table
WITH (
    'connector' = 'kafka',
    ...
)
AS SELECT id, name, age FROM source_table WHERE mod(id, 10) = 0;"""

CTAS_EQUIVALENT = """CREATE TABLE my_ctas_table (
    id BIGINT,
    name STRING,
    age INT
) WITH (
    'connector' = 'kafka',
    ...
);
 
INSERT INTO my_ctas_table SELECT id, name, age FROM source_table WHERE mod(id, 10) = 0;"""

RTAS = """REPLACE TABLE my_rtas_table
WITH (
    'connector' = 'kafka',
    ...
)
AS SELECT id, name, age FROM source_table WHERE mod(id, 10) = 0;"""

RTAS_EQUIVALENT = """DROP TABLE my_rtas_table;

CREATE TABLE my_rtas_table (
    id BIGINT,
    name STRING,
    age INT
) WITH (
    'connector' = 'kafka',
    ...
);
 
INSERT INTO my_rtas_table SELECT id, name, age FROM source_table WHERE mod(id, 10) = 0;"""


def test_l1_the_create_table_pages_physical_columns_are_the_values_fields() -> None:
    assert refused(PHYSICAL)[2] == "expected a quoted option name like 'topic', found ."
    table_ = compiled(options_written_out(PHYSICAL, "mytable")).table("mytable")
    assert [(c.name, c.type.name, c.metadata) for c in table_.columns] == [
        ("user_id", "BIGINT", None), ("name", "VARCHAR", None)]
    assert [f["name"] for f in table_.avro_schema["fields"]] == ["user_id", "name"]


@pytest.mark.parametrize("page, column", [(METADATA_FROM, "record_time"),
                                          (METADATA_NAMED, "timestamp")],
                         ids=["metadata-from", "metadata-named-by-the-column"])
def test_l1_the_create_table_pages_metadata_column_reads_the_records_timestamp(
        page: str, column: str) -> None:
    table_ = compiled(options_written_out(page, "mytable")).table("mytable")
    assert (table_.column(column).metadata, table_.column(column).type.name) == (
        "timestamp", "TIMESTAMP")
    assert [f["name"] for f in table_.avro_schema["fields"]] == ["user_id", "name"]


def test_l7_the_create_table_pages_insert_of_a_metadata_column_is_refused_at_the_column() -> None:
    """The page writes the Kafka timestamp back, into the table it reads: Tidemark writes no
    metadata (and a table INSERT INTO writes is read by no view of the program)."""
    line, column, message, fix = refused(
        options_written_out(METADATA_FROM, "mytable") + "\nINSERT INTO MyTable SELECT user_id, "
        "name, record_time + INTERVAL '1' SECOND FROM MyTable;")
    assert (line, column) == (4, 3)
    assert message == ("column mytable.record_time is not written by INSERT INTO: writing "
                       "Kafka metadata (or a processing time, or a computed column) is not "
                       "supported")
    assert fix == "remove the column from the table INSERT INTO writes"


def test_l7_the_create_table_pages_metadata_cast_to_bigint_is_refused_with_its_type() -> None:
    """Flink casts a metadata column declared with another type; Tidemark takes the key's."""
    line, column, message, fix = refused(options_written_out(METADATA_CAST, "mytable"))
    assert (line, column) == (4, 3)
    assert message == ("column mytable.timestamp is BIGINT, but METADATA FROM 'timestamp' is "
                       "TIMESTAMP")
    assert fix == "declare it TIMESTAMP"


def test_l1_the_create_table_pages_virtual_metadata_column_is_read() -> None:
    """The page's VIRTUAL example, as written, ends its columns with a comma; without it, its
    ``timestamp BIGINT METADATA`` is the cast refused above; declared TIMESTAMP_LTZ(3), the
    table reads both metadata columns (a Tidemark table writes neither)."""
    text = options_written_out(METADATA_VIRTUAL, "mytable")
    assert refused(text)[:3] == (6, 1, "expected a column name, found )")
    text = text.replace("`name` STRING,\n)", "`name` STRING\n)")
    assert refused(text)[2].startswith("column mytable.timestamp is BIGINT")
    table_ = compiled(text.replace("`timestamp` BIGINT", "`timestamp` TIMESTAMP_LTZ(3)")
                      ).table("mytable")
    assert [(c.name, c.metadata) for c in table_.columns] == [
        ("timestamp", "timestamp"), ("offset", "offset"), ("user_id", None), ("name", None)]
    assert [f["name"] for f in table_.avro_schema["fields"]] == ["user_id", "name"]


def test_l1_the_create_table_pages_computed_column_is_computed_from_the_record() -> None:
    circuit = compiled(options_written_out(COMPUTED, "mytable")
                       + "\n" + sink("result", "  user_id BIGINT, cost DOUBLE")
                       + "INSERT INTO result SELECT user_id, cost FROM MyTable;")
    table_ = circuit.table("mytable")
    cost = table_.column("cost")
    assert cost.computed is not None and cost.type.name == "DOUBLE"
    assert [f["name"] for f in table_.avro_schema["fields"]] == ["user_id", "price", "quantity"]
    steps = [StepInput({"mytable": [{"user_id": 1, "price": 2.5, "quantity": 4.0}]})]
    assert outputs(circuit, steps, "result") == [{"user_id": 1, "cost": 10.0}]


def test_l2_the_create_table_pages_watermark_is_lateness_of_five_seconds() -> None:
    table_ = compiled(options_written_out(WATERMARKED, "orders")).table("orders")
    assert [(lt.column, lt.amount) for lt in table_.lateness] == [("order_time", 5000)]
    assert not table_.column("order_time").type.nullable


def test_l7_create_table_like_is_refused_and_the_pages_equivalent_table_compiles() -> None:
    """As written, the page's Orders names no topic and no format (the first error); with
    them, LIKE is refused. The table the page says LIKE makes compiles, given them too."""
    _, _, message, _ = refused(LIKE_ORDERS)
    assert message == "table orders has no 'format'"
    with_topic = "'connector' = 'kafka', 'topic' = 'orders', 'format' = 'json',\n"
    text = LIKE_ORDERS.replace("'connector' = 'kafka',\n", with_topic, 1)
    assert refused(text) == (17, 1, "LIKE is not supported: a table's columns, watermark and "
                             "options are written out in full in its own definition",
                             "write the columns and options of orders in this table's "
                             "definition")
    table_ = compiled(LIKE_ORDERS_EQUIVALENT.replace("'connector' = 'kafka',\n", with_topic)
                      ).table("orders_with_watermark")
    assert [c.name for c in table_.columns] == ["user", "product", "order_time"]
    assert [(lt.column, lt.amount) for lt in table_.lateness] == [("order_time", 5000)]
    assert table_.startup_mode == "latest-offset"


def test_l7_the_like_options_example_is_refused_at_partitioned_by_and_at_like() -> None:
    text = options_written_out(LIKE_OPTIONS, "orders_in_kafka")
    with pytest.raises(ProgramError) as info:
        compile_program("flink.sql", text)
    found = [(d.position.line, d.position.column, d.message, d.fix)
             for d in info.value.diagnostics]
    assert found == [(9, 1, *PARTITIONED), (
        23, 1, "LIKE is not supported: a table's columns, watermark and options are written "
        "out in full in its own definition", "write the columns and options of orders_in_file "
        "in this table's definition")]


CTAS_REFUSED = ("CREATE TABLE ... AS SELECT is not supported: a table is an input, declared by "
                "its columns, not made by a query")
REPLACED = ("is not supported: a program is the whole definition of its tables and views, "
            "compiled together, so nothing in it replaces one")
REPLACE_FIX = ("change CREATE TABLE my_rtas_table (...) WITH (...) itself to what it should be "
               "(a query's rows: INSERT INTO my_rtas_table SELECT ...); the program is "
               "compiled again as a whole")


@pytest.mark.parametrize("statement, expected", [
    (CTAS, (6, 1, CTAS_REFUSED, "declare the table with its columns, then INSERT INTO "
            "my_ctas_table SELECT ..., or write CREATE VIEW my_ctas_table WITH ('topic' = ...) "
            "AS SELECT ...")),
    # CTAS with columns, as Flink 1.20 writes it: refused at AS too.
    (CTAS_EQUIVALENT.replace(";\n \nINSERT INTO my_ctas_table", "\nAS"),
     (9, 1, CTAS_REFUSED, "declare the table with its columns, then INSERT INTO my_ctas_table "
      "SELECT ..., or write CREATE VIEW my_ctas_table WITH ('topic' = ...) AS SELECT ...")),
    (RTAS, (1, 1, "REPLACE TABLE " + REPLACED, REPLACE_FIX)),
    # The section's grammar: [CREATE OR] REPLACE TABLE.
    ("CREATE OR " + RTAS, (1, 8, "CREATE OR REPLACE TABLE " + REPLACED, REPLACE_FIX)),
    (RTAS_EQUIVALENT, (1, 1, "unsupported statement DROP: a program declares the tables and "
                       "views that run, compiled together; it changes no catalog",
                       "remove the DROP statement (a table no view reads is not read)")),
], ids=["ctas", "ctas-with-columns", "rtas", "create-or-replace", "drop-table"])
def test_l7_create_and_replace_table_as_select_are_refused(
        statement: str, expected: tuple[int, int, str, str]) -> None:
    """Positions are the statement's, after the table it reads."""
    line, column, message, fix = refused(SOURCE_TABLE + options_written_out(statement, "t"))
    assert (line - SOURCE_TABLE.count("\n"), column, message, fix) == expected


def test_l3_the_create_table_as_pages_equivalent_insert_writes_the_selected_rows() -> None:
    circuit = compiled(SOURCE_TABLE + options_written_out(CTAS_EQUIVALENT, "my_ctas_table"))
    view = circuit.view("my_ctas_table")
    assert [c.name for c in view.columns] == ["id", "name", "age"]
    assert view.output is not None and view.output.topic == "my_ctas_table"
    steps = [StepInput({"source_table": [{"id": 10, "name": "a", "age": 1},
                                         {"id": 11, "name": "b", "age": 2}]})]
    assert outputs(circuit, steps, "my_ctas_table") == [{"id": 10, "name": "a", "age": 1}]


@pytest.mark.parametrize("statement", [
    # The DISTRIBUTED examples of the page from Flink 1.20 on, which write no WITH.
    "CREATE TABLE MyTable (uid BIGINT, name STRING) DISTRIBUTED BY HASH(uid) INTO 4 BUCKETS;",
    "CREATE TABLE MyTable (uid BIGINT, name STRING) DISTRIBUTED BY (uid) INTO 4 BUCKETS;",
], ids=["hash", "columns"])
def test_l7_distributed_by_is_refused(statement: str) -> None:
    assert refused(statement) == (
        1, 48, "DISTRIBUTED BY is not supported: a Kafka topic's partitions are its own, set "
        f"where it is created, not a table's buckets; {PLACED}",
        "remove DISTRIBUTED BY ..." + PARTITION_FIX)


def test_l7_distributed_into_buckets_is_refused_by_its_own_words() -> None:
    line, column, message, fix = refused(table("t", "  uid BIGINT").replace(
        ") WITH", ") DISTRIBUTED INTO 4 BUCKETS WITH"))
    assert (line, column) == (3, 3)
    assert message.startswith("DISTRIBUTED INTO is not supported: a Kafka topic's partitions")
    assert fix == "remove DISTRIBUTED INTO ..." + PARTITION_FIX


@pytest.mark.parametrize("name, column", [("cat.db.MyTable", 14), ("db.MyTable", 14),
                                          ("`cat`.`db`.`MyTable`", 14)],
                         ids=["catalog", "database", "quoted"])
def test_l7_a_catalog_qualified_table_name_is_refused_at_the_name(name: str, column: int) -> None:
    line, at, message, fix = refused(f"CREATE TABLE {name} (uid BIGINT) WITH "
                                     f"({KAFKA.format(topic='t')});")
    assert (line, at) == (1, column)
    assert message.startswith("catalog and database names are not supported: name the table "
                              "alone, not ")
    assert fix == "write CREATE TABLE mytable"


def test_l1_the_grammars_primary_key_forms_key_the_table_and_comment_is_ignored() -> None:
    """The PRIMARY KEY section has no example; its grammar's column and table constraints
    both key the table and make its column NOT NULL. A COMMENT, on a table or any kind of
    column, is read and dropped: it changes nothing that is read or written."""
    for columns in ["id BIGINT PRIMARY KEY NOT ENFORCED, name STRING",
                    "id BIGINT, name STRING, CONSTRAINT pk PRIMARY KEY (id) NOT ENFORCED"]:
        table_ = compiled(table("t", "  " + columns)).table("t")
        assert table_.primary_key == ("id",) and not table_.column("id").type.nullable
    commented = table("t", """  id BIGINT PRIMARY KEY NOT ENFORCED COMMENT 'the id',
  name STRING NOT NULL COMMENT 'the name',
  ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL COMMENT 'the record''s time',
  upper_name AS UPPER(name) COMMENT 'computed',
  pt AS PROCTIME() COMMENT 'processing time',
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND""").replace(") WITH", ") COMMENT 'a table' WITH")
    plain = re.sub(r" COMMENT '(?:[^']|'')*'", "", commented)
    assert "COMMENT" not in plain
    assert compiled(commented).table("t") == compiled(plain).table("t")
    line, column, message, fix = refused(table("t", "  id BIGINT COMMENT id"))
    assert (line, column, message, fix) == (2, 21, "expected a quoted comment after COMMENT, "
                                            "found id", "write COMMENT 'text'")
    line, column, message, fix = refused(table("t", "  id BIGINT").replace(
        ") WITH", ") COMMENT 'a' COMMENT 'b' WITH"))
    assert (line, column, message) == (3, 15, "unexpected COMMENT: expected ';'")
    assert fix.startswith("a table is: CREATE TABLE name (column type, ...) [COMMENT 'text']")


# -- Kafka and Upsert Kafka connectors (kafka.md, upsert-kafka.md) ------------------------------

def test_l7_the_kafka_pages_csv_table_is_refused_at_its_format() -> None:
    line, column, message, fix = refused("""CREATE TABLE KafkaTable (
  `user_id` BIGINT,
  `item_id` BIGINT,
  `behavior` STRING,
  `ts` TIMESTAMP(3) METADATA FROM 'timestamp'
) WITH (
  'connector' = 'kafka',
  'topic' = 'user_behavior',
  'properties.bootstrap.servers' = 'localhost:9092',
  'properties.group.id' = 'testGroup',
  'scan.startup.mode' = 'earliest-offset',
  'format' = 'csv'
)""")
    assert (line, column) == (12, 3)
    assert message == ("unsupported option 'format' of table kafkatable: Tidemark has no CSV "
                       "format: produce the values as JSON or Avro")
    assert fix == "use one of 'avro', 'avro-confluent', 'json', 'protobuf-confluent', 'raw'"


def test_l1_the_kafka_pages_metadata_table_compiles_with_json_values() -> None:
    circuit = compiled("""CREATE TABLE KafkaTable (
  `event_time` TIMESTAMP(3) METADATA FROM 'timestamp',
  `partition` BIGINT METADATA VIRTUAL,
  `offset` BIGINT METADATA VIRTUAL,
  `user_id` BIGINT,
  `item_id` BIGINT,
  `behavior` STRING
) WITH (
  'connector' = 'kafka',
  'topic' = 'user_behavior',
  'properties.bootstrap.servers' = 'localhost:9092',
  'properties.group.id' = 'testGroup',
  'scan.startup.mode' = 'earliest-offset',
  'format' = 'json'
);""")
    table_ = circuit.table("kafkatable")
    assert [(c.name, str(c.type), c.metadata) for c in table_.columns[:3]] == [
        ("event_time", "TIMESTAMP", "timestamp"), ("partition", "BIGINT", "partition"),
        ("offset", "BIGINT", "offset")]
    assert (table_.topic, table_.format, table_.startup_mode) == (
        "user_behavior", "json", "earliest-offset")
    assert table_.bootstrap_servers == "localhost:9092"
    (warning,) = circuit.warnings
    assert warning.message.startswith("option 'properties.group.id' of table kafkatable "
                                      "changes nothing in Tidemark")


def test_s13_the_upsert_kafka_pages_full_example_is_an_upsert_output() -> None:
    circuit = compiled("""CREATE TABLE pageviews_per_region (
  user_region STRING,
  pv BIGINT,
  uv BIGINT,
  PRIMARY KEY (user_region) NOT ENFORCED
) WITH (
  'connector' = 'upsert-kafka',
  'topic' = 'pageviews_per_region',
  'properties.bootstrap.servers' = '...',
  'key.format' = 'avro',
  'value.format' = 'avro'
);

CREATE TABLE pageviews (
  user_id BIGINT,
  page_id BIGINT,
  viewtime TIMESTAMP,
  user_region STRING,
  WATERMARK FOR viewtime AS viewtime - INTERVAL '2' SECOND
) WITH (
  'connector' = 'kafka',
  'topic' = 'pageviews',
  'properties.bootstrap.servers' = '...',
  'format' = 'json'
);

-- calculate the pv, uv and insert into the upsert-kafka sink
INSERT INTO pageviews_per_region
SELECT
  user_region,
  COUNT(*),
  COUNT(DISTINCT user_id)
FROM pageviews
GROUP BY user_region;
""")
    view = circuit.view("pageviews_per_region")
    assert view.output is not None
    assert (view.output.format, view.output.key_columns, view.output.encoding) == (
        "upsert", ("user_region",), "avro")
    # Its declared 'key.format', as Flink writes it: the record of the key columns.
    assert view.output.key_format == "avro"
    assert view.output.key_schema == {
        "type": "record", "name": "record", "namespace": "org.apache.flink.avro.generated",
        "fields": [{"name": "user_region", "type": ["null", "string"], "default": None}]}
    assert [c.name for c in view.columns] == ["user_region", "pv", "uv"]
    assert circuit.table("pageviews").lateness[0].amount == 2000
    steps = [StepInput({"pageviews": [
        {"user_id": 1, "page_id": 1, "viewtime": at("10:00"), "user_region": "eu"},
        {"user_id": 1, "page_id": 2, "viewtime": at("10:01"), "user_region": "eu"},
        {"user_id": 2, "page_id": 1, "viewtime": at("10:02"), "user_region": "us"}]})]
    assert sorted((r["user_region"], r["pv"], r["uv"])
                  for r in outputs(circuit, steps, "pageviews_per_region")) == [
        ("eu", 2, 1), ("us", 1, 1)]


KEY_AND_VALUE = """CREATE TABLE KafkaTable (
  `user_id` BIGINT,
  `item_id` BIGINT,
  `behavior` STRING
) WITH (
  'connector' = 'kafka',
  'topic' = 'user_behavior',
  'properties.bootstrap.servers' = 'localhost:9092',
  'format' = 'json',
  'key.format' = 'json',
  'key.fields' = 'user_id;item_id',
  'key.json.ignore-parse-errors' = 'true',
  'value.fields-include' = '{include}'
)"""


def test_l1_the_kafka_pages_key_fields_are_read_from_the_key_or_the_value() -> None:
    every = compiled(KEY_AND_VALUE.format(include="ALL")).table("kafkatable")
    assert (every.key_format, every.key_fields) == ("json", ("user_id", "item_id"))
    # ALL (Flink's default): the value holds them and they are read from it; the key is
    # decoded and checked (a bad key is a dead letter, where Flink's job would fail).
    assert [f["name"] for f in every.avro_schema["fields"]] == [
        "user_id", "item_id", "behavior"]
    assert all(c.metadata is None for c in every.columns)
    apart = compiled(KEY_AND_VALUE.format(include="EXCEPT_KEY")).table("kafkatable")
    assert [f["name"] for f in apart.avro_schema["fields"]] == ["behavior"]
    assert [c.name for c in apart.columns if c.metadata == "key"] == ["user_id", "item_id"]


def test_l7_the_upsert_kafka_pages_elided_options_are_a_syntax_error() -> None:
    _, _, message, _ = refused("""CREATE TABLE KafkaTable (
  `ts` TIMESTAMP(3) METADATA FROM 'timestamp',
  `user_id` BIGINT,
  `item_id` BIGINT,
  `behavior` STRING,
  PRIMARY KEY (`user_id`) NOT ENFORCED
) WITH (
  'connector' = 'upsert-kafka',
  ...

  'key.format' = 'json',
  'key.json.ignore-parse-errors' = 'true',

  'value.format' = 'json',
  'value.json.fail-on-missing-field' = 'false',
  'value.fields-include' = 'EXCEPT_KEY'
)""")
    assert message == "expected a quoted option name like 'topic', found ."


def test_s18_an_upsert_kafka_table_is_read_as_its_latest_row_per_key() -> None:
    """The upsert-kafka page's read table (its options elided above, written out): its key
    is the PRIMARY KEY, read from the Kafka key, and views read its latest row per key
    (ADR 0030; tests/unit/circuit/test_reference_upsert_kafka_tables.py)."""
    circuit = compiled("""CREATE TABLE KafkaTable (
  `ts` TIMESTAMP(3) METADATA FROM 'timestamp',
  `user_id` BIGINT,
  `item_id` BIGINT,
  `behavior` STRING,
  PRIMARY KEY (`user_id`) NOT ENFORCED
) WITH (
  'connector' = 'upsert-kafka',
  'topic' = 'user_behavior',
  'key.format' = 'json',
  'key.json.ignore-parse-errors' = 'true',
  'value.format' = 'json',
  'value.json.fail-on-missing-field' = 'false',
  'value.fields-include' = 'EXCEPT_KEY'
);
CREATE TABLE per_behavior (behavior STRING, n BIGINT, PRIMARY KEY (behavior) NOT ENFORCED)
WITH ('connector' = 'upsert-kafka', 'topic' = 'per_behavior', 'key.format' = 'json',
  'value.format' = 'json');
INSERT INTO per_behavior SELECT behavior, COUNT(*) FROM KafkaTable GROUP BY behavior;""")
    table_ = circuit.table("kafkatable")
    assert table_.upserts and table_.changelog and table_.deletes_by_tombstone
    assert (table_.key_format, table_.key_fields) == ("json", ("user_id",))
    assert [f["name"] for f in table_.avro_schema["fields"]] == ["item_id", "behavior"]
    assert circuit.view("per_behavior").sources == ("kafkatable.latest",)


# -- Formats (avro.md, avro-confluent.md, json.md, debezium.md) ---------------------------------

USER_BEHAVIOR = """CREATE TABLE user_behavior (
  user_id BIGINT,
  item_id BIGINT,
  category_id BIGINT,
  behavior STRING,
  ts TIMESTAMP(3)
) WITH (
 'connector' = 'kafka',
 'topic' = 'user_behavior',
 'properties.bootstrap.servers' = 'localhost:9092',
 'properties.group.id' = 'testGroup',
 {format}
)"""


def test_l1_the_avro_and_json_pages_tables_compile() -> None:
    avro = compiled(USER_BEHAVIOR.format(format="'format' = 'avro'"))
    assert avro.table("user_behavior").format == "avro"
    json = compiled(USER_BEHAVIOR.format(format="""'format' = 'json',
 'json.fail-on-missing-field' = 'false',
 'json.ignore-parse-errors' = 'true'"""))
    assert json.table("user_behavior").format == "json"
    assert [w.message.split(":")[0] for w in json.warnings] == [
        "option 'properties.group.id' of table user_behavior changes nothing in Tidemark",
        "option 'json.ignore-parse-errors' of table user_behavior changes nothing in Tidemark"]


AVRO_CONFLUENT = [
    ("""CREATE TABLE user_created (

  -- one column mapped to the Kafka raw UTF-8 key
  the_kafka_key STRING,
  
  -- a few columns mapped to the Avro fields of the Kafka value
  id STRING,
  name STRING, 
  email STRING

) WITH (

  'connector' = 'kafka',
  'topic' = 'user_events_example1',
  'properties.bootstrap.servers' = 'localhost:9092',

  -- UTF-8 string as Kafka keys, using 'the_kafka_key' table column
  'key.format' = 'raw',
  'key.fields' = 'the_kafka_key',

  'value.format' = 'avro-confluent',
  'value.avro-confluent.url' = 'http://localhost:8082',
  'value.fields-include' = 'EXCEPT_KEY'
)""", "key.format"),
    ("""CREATE TABLE user_created (
  kafka_key_id STRING,
  id STRING,
  name STRING, 
  email STRING
) WITH (
  'connector' = 'kafka',
  'topic' = 'user_events_example2',
  'properties.bootstrap.servers' = 'localhost:9092',
  'key.format' = 'avro-confluent',
  'key.avro-confluent.url' = 'http://localhost:8082',
  'key.fields' = 'kafka_key_id',
  'key.fields-prefix' = 'kafka_key_',
  'value.format' = 'avro-confluent',
  'value.avro-confluent.url' = 'http://localhost:8082',
  'value.fields-include' = 'EXCEPT_KEY',
  'key.avro-confluent.subject' = 'user_events_example2-key2',
  'value.avro-confluent.subject' = 'user_events_example2-value2'
)""", "key.format"),
]


def test_l1_the_avro_confluent_pages_raw_key_is_a_column_of_the_key() -> None:
    table_ = compiled(AVRO_CONFLUENT[0][0]).table("user_created")
    assert (table_.key_format, table_.key_fields) == ("raw", ("the_kafka_key",))
    assert table_.column("the_kafka_key").metadata == "key"
    assert [f["name"] for f in table_.avro_schema["fields"]] == ["id", "name", "email"]


def test_l1_the_avro_confluent_pages_prefixed_key_fields_name_unprefixed_key_fields() -> None:
    circuit = compile_program("flink.sql", AVRO_CONFLUENT[1][0])
    table_ = circuit.table("user_created")
    assert (table_.key_format, table_.key_fields) == ("avro-confluent", ("kafka_key_id",))
    assert table_.key_schema is not None
    assert [f["name"] for f in table_.key_schema["fields"]] == ["id"]
    assert [f["name"] for f in table_.avro_schema["fields"]] == ["id", "name", "email"]
    # The subjects name what a writer registers; the reader reads by schema id.
    assert sorted(d.message.split("'")[1] for d in circuit.warnings
                  if "subject" in d.message) == ["key.avro-confluent.subject",
                                                 "value.avro-confluent.subject"]


def test_l7_a_key_fields_prefix_needs_except_key_and_prefixed_columns() -> None:
    text = AVRO_CONFLUENT[1][0]
    _, _, message, fix = refused(text.replace("'EXCEPT_KEY'", "'ALL'"))
    assert message == ("'key.fields-prefix' of table user_created renames the key's fields, "
                       "but 'value.fields-include' = 'ALL' reads them from the value too")
    assert fix.startswith("add 'value.fields-include' = 'EXCEPT_KEY'")
    line, column, message, fix = refused(text.replace("'kafka_key_',", "'key_',"))
    assert (line, message) == (13, "key column user_created.kafka_key_id does not start with "
                               "the 'key.fields-prefix' 'key_'")
    assert fix == "name it key_<field> (the key's field with the prefix)"


def test_l1_an_avro_confluent_table_maps_the_registry_url() -> None:
    circuit = compiled("""CREATE TABLE user_created (id STRING, name STRING, email STRING)
WITH ('connector' = 'kafka', 'topic' = 'users',
  'value.format' = 'avro-confluent',
  'value.avro-confluent.url' = 'http://localhost:8082');""")
    table_ = circuit.table("user_created")
    assert table_.format == "avro-confluent"
    assert table_.schema_registry == {"url": "http://localhost:8082"}


def test_l7_the_debezium_pages_table_without_a_primary_key_is_refused() -> None:
    """Its updates and deletes are by key (ADR 0028): the page's table, as written, has none."""
    line, column, message, fix = refused("""CREATE TABLE topic_products (
  -- schema is totally the same to the MySQL "products" table
  id BIGINT,
  name STRING,
  description STRING,
  weight DECIMAL(10, 2)
) WITH (
 'connector' = 'kafka',
 'topic' = 'products_binlog',
 'properties.bootstrap.servers' = 'localhost:9092',
 'properties.group.id' = 'testGroup',
 -- using 'debezium-json' as the format to interpret Debezium JSON messages
 -- please use 'debezium-avro-confluent' if Debezium encodes messages in Avro format
 'format' = 'debezium-json'
)""")
    assert (line, column) == (1, 14)
    assert message == ("table topic_products reads change events ('format' = "
                       "'debezium-json'), which update and delete rows by key, but has no "
                       "PRIMARY KEY")
    assert fix.startswith("add PRIMARY KEY (")


def test_l1_the_debezium_avro_format_reads_change_events_through_the_registry() -> None:
    circuit = compiled("""CREATE TABLE topic_products (
  id BIGINT, name STRING, PRIMARY KEY (id) NOT ENFORCED
) WITH (
 'connector' = 'kafka',
 'topic' = 'products_binlog',
 'format' = 'debezium-avro-confluent',
 'debezium-avro-confluent.url' = 'http://r:8081'
)""")
    table = circuit.table("topic_products")
    assert (table.format, table.changelog, table.schema_registry) == (
        "debezium-avro-confluent", True, {"url": "http://r:8081"})


# -- The dialect, SET, WATERMARK FOR (docs/semantics.md, Flink dialect) -------------------------

def test_l2_watermark_for_is_lateness_on_its_column_and_makes_it_not_null() -> None:
    flink = compiled(BID)
    tidemark = compile_program("t.sql", "CREATE TABLE bid (bidtime TIMESTAMP NOT NULL LATENESS "
                               "INTERVAL '1' SECOND, price DECIMAL(10, 2), item VARCHAR, "
                               "supplier_id VARCHAR) WITH ('topic' = 'bid', 'format' = "
                               "'json');")
    mine, theirs = flink.table("bid"), tidemark.table("bid")
    assert (mine.columns, mine.lateness, mine.avro_schema) == (
        theirs.columns, theirs.lateness, theirs.avro_schema)
    assert (flink.dialect, tidemark.dialect) == ("flink", "tidemark")
    assert "dialect flink" in explain_text(flink).splitlines()[1]


@pytest.mark.parametrize("strategy", ["bidtime - INTERVAL '1' SECOND + INTERVAL '1' SECOND",
                                      "bidtime + INTERVAL '1' SECOND", "price",
                                      "TO_TIMESTAMP(item)"])
def test_l7_other_watermark_strategies_are_refused_with_the_lateness_form(strategy: str) -> None:
    text = BID.replace("bidtime - INTERVAL '1' SECOND", strategy)
    line, column, message, fix = refused(text)
    assert (line, column) == (6, 28)
    assert message == (f"unsupported watermark strategy {strategy} for bidtime: Tidemark's "
                       "watermark is the greatest bidtime read minus a constant delay")
    assert fix.startswith("write WATERMARK FOR bidtime AS bidtime - INTERVAL '5' SECOND")


def test_l2_a_fractional_watermark_delay_is_milliseconds() -> None:
    circuit = compiled(BID.replace("INTERVAL '1' SECOND", "INTERVAL '0.25' SECOND"))
    assert circuit.table("bid").lateness[0].amount == 250
    _, _, message, _ = refused(BID.replace("INTERVAL '1' SECOND", "INTERVAL '0.0001' SECOND"))
    assert message == ("INTERVAL '0.0001' SECOND is not a whole number of milliseconds, the "
                       "precision of TIMESTAMP")


def test_s12_set_tidemark_dialect_chooses_the_emission_of_a_window_aggregate() -> None:
    query = ("CREATE VIEW v WITH ('topic' = 'v') AS SELECT window_start, window_end, "
             "SUM(price) AS total FROM TABLE(TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), "
             "INTERVAL '10' MINUTES)) GROUP BY window_start, window_end;")
    flink = compiled(BID + query).view("v")
    tidemark = compiled("SET 'tidemark.dialect' = 'tidemark';\n" + BID + query).view("v")
    assert flink.output is not None and tidemark.output is not None
    assert (flink.emit.after_watermark, flink.output.format) == (True, "append")
    assert (tidemark.emit.after_watermark, tidemark.output.format) == (False, "upsert")


def test_l7_set_keys_warn_when_they_cannot_change_results_and_fail_otherwise() -> None:
    circuit = compiled("SET 'parallelism.default' = '4';\nSET 'pipeline.name' = 'job';\n"
                       "SET 'execution.checkpointing.interval' = '10s';\n"
                       "SET 'table.local-time-zone' = 'UTC';\n" + BID)
    assert [w.message.split(" changes")[0] for w in circuit.warnings] == [
        "SET 'parallelism.default'", "SET 'pipeline.name'",
        "SET 'execution.checkpointing.interval'"]
    line, column, message, _ = refused(BID + "SET 'table.exec.state.ttl' = '1 h';")
    assert (line, column) == (BID.count("\n") + 1, 5)
    assert message.startswith("unsupported SET 'table.exec.state.ttl': Tidemark frees state "
                              "by waterlines")


def test_l3_create_temporary_view_and_an_unnamed_column_of_a_topic_view() -> None:
    circuit = compiled(BID + "CREATE TEMPORARY VIEW IF NOT EXISTS cheap AS SELECT item, "
                       "price FROM Bid WHERE price < 2;")
    assert circuit.view("cheap").output is None
    _, _, message, _ = refused(BID + "CREATE VIEW v WITH ('topic' = 'v') AS SELECT item, "
                               "price * 2 FROM Bid;")
    assert message == ("column 2 of view v has no name of its own (an expression without AS, "
                       "or a name an earlier column has), which its topic's schema needs")
    _, _, message, _ = refused(BID + "CREATE VIEW v WITH ('topic' = 'v') AS SELECT item, "
                               "item FROM Bid;")
    assert message.startswith("column 2 of view v has no name of its own")


def test_l3_an_insert_into_may_select_one_column_twice() -> None:
    """Flink writes an INSERT INTO's columns by position, so its SELECT may repeat a name
    (the key column and a value column of one source column, as the Avro Confluent page's
    ``user_created`` holds ``kafka_key_id`` and ``id``)."""
    circuit = compiled(BID + """CREATE TABLE twice (k STRING, item STRING, price DECIMAL(10, 2))
WITH ('connector' = 'kafka', 'topic' = 'twice', 'format' = 'json');
INSERT INTO twice SELECT item, item, price FROM Bid;""")
    assert [c.name for c in circuit.view("twice").columns] == ["k", "item", "price"]


def test_l7_a_statement_set_without_end_is_refused() -> None:
    _, _, message, _ = refused(ORDERS_INSERT + "EXECUTE STATEMENT SET BEGIN\nINSERT INTO "
                               "RubberOrders SELECT product, amount FROM Orders;")
    assert message == "the statement set has no END"
