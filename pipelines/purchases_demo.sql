-- What `tidemark demo` runs: the card purchases of purchases.sql, with a windowed aggregate
-- beside the filter view. Purchases may arrive up to one hour out of order; anything older
-- than the waterline (the largest date_time seen so far minus one hour) is late and goes to
-- purchases.dlq with headers that say why.

CREATE TABLE purchase (
    date_time   TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR,
    credit_card BIGINT NOT NULL,
    amount      DECIMAL(10, 2)
) WITH (
    'topic'       = 'purchases',
    'format'      = 'avro',
    'schema'      = 'schemas/purchase.avsc',
    'dead_letter' = 'purchases.dlq'
);

-- Large purchases, as they arrive (stateless: a filter and a projection).
CREATE VIEW large_purchase WITH ('topic' = 'purchases.large', 'format' = 'append') AS
SELECT date_time, credit_card, amount, CAST(amount * 100 AS BIGINT) AS amount_cents
FROM purchase
WHERE amount >= 100;

-- Purchases per 10 minutes of date_time, one row per window once it is final: when the
-- waterline passes the window's end, no purchase can join it any more (a later one is late).
CREATE VIEW purchases_per_10m WITH ('topic' = 'purchases.per_10m', 'format' = 'append') AS
SELECT window_start, window_end,
       COUNT(*)    AS purchases,
       SUM(amount) AS total,
       MAX(amount) AS largest
FROM TABLE(TUMBLE(TABLE purchase, DESCRIPTOR(date_time), INTERVAL '10' MINUTE))
GROUP BY window_start, window_end
EMIT AFTER WATERMARK;
