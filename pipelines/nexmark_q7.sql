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
