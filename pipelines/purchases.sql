-- Card purchases, from Feldera's "LATENESS in streaming programs" post.
-- Purchases may arrive up to one hour out of order; anything older than the waterline
-- (the largest date_time seen so far minus one hour) is late and goes to purchases.dlq.

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
