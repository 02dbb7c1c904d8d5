-- Amounts and exchange rates, from Flink's time-attribute design: each amount converted at
-- the rate of its currency valid at the amount's time (an event-time temporal join), and
-- each currency's daily sum at the day's closing rate (a temporal join AS OF the end of a
-- window, the aggregate's time attribute). rates
-- is a versioned table: its rows are versions of their currency (PRIMARY KEY), each valid
-- from its rowtime until the next one. An amount is written once the rates' waterline has
-- passed its time (no earlier rate can still come), with NULLs when its currency has no
-- rate yet. Both tables arrive in rowtime order (LATENESS 0); a punctuation moves a quiet
-- table's waterline. Each table has its own dead-letter topic.

CREATE TABLE amounts (
    rowtime  TIMESTAMP NOT NULL LATENESS INTERVAL '0' SECOND,
    currency VARCHAR   NOT NULL,
    amount   INT       NOT NULL
) WITH (
    'topic'       = 'amounts',
    'format'      = 'avro',
    'dead_letter' = 'amounts.dlq'
);

CREATE TABLE rates (
    rowtime  TIMESTAMP      NOT NULL LATENESS INTERVAL '0' SECOND,
    currency VARCHAR        NOT NULL,
    rate     DECIMAL(10, 2) NOT NULL,
    PRIMARY KEY (currency) NOT ENFORCED
) WITH (
    'topic'       = 'rates',
    'format'      = 'avro',
    'dead_letter' = 'rates.dlq'
);

-- Each amount at the rate of its currency valid at the amount's time.
CREATE VIEW converted WITH ('topic' = 'amounts_rates.converted', 'format' = 'append') AS
SELECT a.rowtime, a.currency, a.amount, r.rate, a.amount * r.rate AS converted
FROM amounts AS a
LEFT JOIN rates FOR SYSTEM_TIME AS OF a.rowtime AS r
  ON a.currency = r.currency;

-- The amounts of each currency summed per day (UTC), final once w(amounts) passes midnight.
CREATE LOCAL VIEW daily AS
SELECT currency, SUM(amount) AS amount_sum, window_end AS day
FROM TABLE(TUMBLE(TABLE amounts, DESCRIPTOR(rowtime), INTERVAL '1' DAY))
GROUP BY currency, window_end
EMIT AFTER WATERMARK;

-- Each day's sum at the day's closing rate: the rate valid at midnight, the day's end.
CREATE VIEW daily_converted WITH ('topic' = 'amounts_rates.daily', 'format' = 'append') AS
SELECT d.day, d.currency, d.amount_sum, r.rate AS closing_rate
FROM daily AS d
JOIN rates FOR SYSTEM_TIME AS OF d.day AS r
  ON d.currency = r.currency;
