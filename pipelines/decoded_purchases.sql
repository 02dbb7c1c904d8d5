-- The decoding case of Feldera's LATENESS post: the event time arrives as a string, so
-- LATENESS goes on the decoded column of a LOCAL view rather than on the table.

CREATE TABLE purchase_raw (
    date_time   VARCHAR NOT NULL,   -- e.g. '2024-01-01 10:00:00'; LATENESS cannot go here
    credit_card BIGINT  NOT NULL,
    amount      DECIMAL(10, 2)
) WITH (
    'topic'  = 'purchases.raw',
    'format' = 'json'
);

CREATE LOCAL VIEW decoded_purchase AS
SELECT CAST(date_time AS TIMESTAMP) AS date_time, credit_card, amount
FROM purchase_raw;

-- Declaring lateness for the date_time column of the view decoded_purchase.
LATENESS decoded_purchase.date_time INTERVAL 1 HOUR;

-- Daily spend per card, over the decoded time, written as JSON like its input: keys and
-- values are JSON objects, times ISO-8601 UTC strings, DECIMALs exact strings.
CREATE VIEW daily_card_spend WITH ('topic' = 'purchases.daily_card_spend', 'encoding' = 'json') AS
SELECT window_start, window_end, credit_card, SUM(amount) AS total, COUNT(*) AS purchases
FROM TABLE(TUMBLE(TABLE decoded_purchase, DESCRIPTOR(date_time), INTERVAL '1' DAY))
GROUP BY window_start, window_end, credit_card;
