-- Hopping windows over card purchases ("One SQL to Rule Them All", section 6.4.2):
-- spend per card over the last 15 minutes, recomputed every 5 minutes.

CREATE TABLE purchase (
    date_time   TIMESTAMP NOT NULL LATENESS INTERVAL '1' HOUR,
    credit_card BIGINT NOT NULL,
    amount      DECIMAL(10, 2)
) WITH (
    'topic'  = 'purchases',
    'format' = 'avro',
    'schema' = 'schemas/purchase.avsc'
);

-- Current totals per card and window, updated as purchases arrive (upsert by the GROUP BY key).
CREATE VIEW card_spend_15m WITH ('topic' = 'purchases.card_spend_15m') AS
SELECT window_start, window_end, credit_card,
       COUNT(*)    AS purchases,
       SUM(amount) AS total
FROM TABLE(HOP(TABLE purchase, DESCRIPTOR(date_time), INTERVAL '5' MINUTE, INTERVAL '15' MINUTE))
GROUP BY window_start, window_end, credit_card
HAVING SUM(amount) > 0;

-- The same windows over all cards, as a changelog (the paper's undo/ptime/ver columns).
CREATE VIEW spend_15m_changes WITH ('topic' = 'purchases.spend_15m_changes') AS
SELECT window_end, SUM(amount) AS total, MAX(amount) AS largest
FROM TABLE(HOP(TABLE purchase, DESCRIPTOR(date_time), INTERVAL '5' MINUTE, INTERVAL '15' MINUTE))
GROUP BY window_end
EMIT STREAM;
