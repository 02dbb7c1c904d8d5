-- NEXMark Query 7 ("One SQL to Rule Them All", section 4, listings 2 and 3): the highest bid
-- of every 10-minute window. Bids arrive out of order by up to 4 minutes of bidtime; a window
-- is final once the bidtime waterline passes its end, and only then is its row written.

CREATE TABLE bid (
    bidtime TIMESTAMP NOT NULL LATENESS INTERVAL '4' MINUTE,
    price   BIGINT    NOT NULL,
    item    VARCHAR   NOT NULL
) WITH (
    'topic'  = 'nexmark.bids',
    'format' = 'avro',
    'schema' = 'schemas/bid.avsc'
);

-- One final row per window (listing 3): wstart, wend, bidtime, price, item of the top bid.
CREATE VIEW max_bid WITH ('topic' = 'nexmark.q7', 'format' = 'append') AS
SELECT window_start            AS wstart,
       window_end              AS wend,
       ARG_MAX(bidtime, price) AS bidtime,
       MAX(price)              AS price,
       ARG_MAX(item, price)    AS item
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTE))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;

-- The same query in the paper's join form (listing 2): each window's highest price, then the
-- bids at that price joined to it, the bid's time bounded by the window's end. A bid waits
-- for its window's row, written once final; two bids that tie for the top price are both
-- written (the ARG_MAX form keeps the earlier).
CREATE LOCAL VIEW max_price AS
SELECT window_end AS wend, MAX(price) AS maxprice
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTE))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;

CREATE VIEW max_bid_join WITH ('topic' = 'nexmark.q7_join', 'format' = 'append') AS
SELECT m.wend - INTERVAL '10' MINUTE AS wstart,
       m.wend                        AS wend,
       b.bidtime                     AS bidtime,
       b.price                       AS price,
       b.item                        AS item
FROM bid AS b
JOIN max_price AS m
  ON b.price = m.maxprice
 AND b.bidtime >= m.wend - INTERVAL '10' MINUTE
 AND b.bidtime < m.wend;
