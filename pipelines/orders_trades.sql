-- Orders and trades, from SQLstream's streaming joins and rowtime bounds: the merge of two
-- streams (UNION ALL, whose waterline is the minimum of the two tables'), counted per five
-- minutes, orders matched by a trade within ten minutes, seen from the order and from the
-- trade (INNER interval joins), and both kept when unmatched (a FULL OUTER join). Both tables arrive in rowtime order (LATENESS 0); a punctuation moves a quiet
-- table's waterline. Each table has its own dead-letter topic.

CREATE TABLE orders (
    rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    orderid INT       NOT NULL,
    ticker  VARCHAR   NOT NULL,
    amount  INT       NOT NULL
) WITH (
    'topic'       = 'orders',
    'format'      = 'avro',
    'dead_letter' = 'orders.dlq'
);

CREATE TABLE trades (
    rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    orderid INT       NOT NULL,
    ticker  VARCHAR   NOT NULL,
    amount  INT       NOT NULL
) WITH (
    'topic'       = 'trades',
    'format'      = 'avro',
    'dead_letter' = 'trades.dlq'
);

-- The merge: every order and trade, complete up to the slower table's waterline.
CREATE VIEW activity WITH ('topic' = 'orders_trades.activity', 'format' = 'append') AS
SELECT rowtime, ticker, amount, 'order' AS kind FROM orders
UNION ALL
SELECT rowtime, ticker, amount, 'trade' AS kind FROM trades;

-- The merge counted per five minutes: a window is complete, and written, once both tables'
-- waterlines have passed its end (the merge's is their minimum).
CREATE VIEW activity_per_five WITH ('topic' = 'orders_trades.per_five', 'format' = 'append') AS
SELECT window_start, window_end, COUNT(*) AS n, SUM(amount) AS amount
FROM TABLE(TUMBLE(TABLE activity, DESCRIPTOR(rowtime), INTERVAL '5' MINUTE))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;

-- Query #1: each order with every trade of it in the ten minutes that follow.
CREATE VIEW order_fills WITH ('topic' = 'orders_trades.by_order', 'format' = 'append') AS
SELECT o.rowtime, o.orderid, o.ticker, o.amount AS orderamount, t.amount AS tradeamount
FROM orders AS o
JOIN trades AS t
  ON o.orderid = t.orderid
 AND t.rowtime BETWEEN o.rowtime AND o.rowtime + INTERVAL '10' MINUTE;

-- Query #2: the same pairs seen from the trade, with the trade's rowtime.
CREATE VIEW trade_orders WITH ('topic' = 'orders_trades.by_trade', 'format' = 'append') AS
SELECT t.rowtime, o.orderid, o.ticker, o.amount AS orderamount, t.amount AS tradeamount
FROM orders AS o
JOIN trades AS t
  ON o.orderid = t.orderid
 AND o.rowtime BETWEEN t.rowtime - INTERVAL '10' MINUTE AND t.rowtime;

-- Query #3: query #1 as an outer join, which keeps both sides: an order without a trade in
-- its ten minutes, or a trade without an order in the ten minutes before it, is written
-- with NULLs once the other table's waterline proves that no match can come, never earlier.
CREATE VIEW order_trade_outer WITH ('topic' = 'orders_trades.outer', 'format' = 'append') AS
SELECT o.rowtime AS order_time, o.orderid, o.ticker, o.amount AS orderamount,
       t.rowtime AS trade_time, t.orderid AS trade_order, t.amount AS tradeamount
FROM orders AS o
FULL OUTER JOIN trades AS t
  ON o.orderid = t.orderid
 AND t.rowtime BETWEEN o.rowtime AND o.rowtime + INTERVAL '10' MINUTE;
